//! A drive in process memory, for benchmarks and tests. Storage is sparse: 2 MiB chunks are
//! mapped on first write, so a huge drive costs (almost) nothing until written; a chunk's
//! memory comes when it is first written (all 2 MiB at once where a huge page backs it).
//!
//! Reads within one chunk are zero-copy: the data handed out shares the chunk's memory, and
//! the transport sends straight from it. A write to a chunk that a read still holds goes to a
//! copy of the chunk (copy-on-write), so data handed out never changes under the reader.

use std::ptr::NonNull;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::{Bytes, BytesMut};

use super::{
    check_geometry, check_range, zeroed_bytes, BackendKind, BoxFuture, Drive, DriveError,
    DriveInfo, ReadBuf,
};

/// Allocation unit. A multiple of every block size, so a block never straddles two chunks
/// and each block is written under one lock (block-level atomicity).
/// 2 MiB, aligned: where the kernel backs anonymous memory with transparent huge pages (asked
/// for with MADV_HUGEPAGE), a chunk is one page. On small pages, random 4K writes faulted a
/// page in on nearly every first write (a third of a core in page clearing and faults, in a
/// profile on the development VM), and every access over gigabytes of them needs its own TLB
/// entry.
const CHUNK: usize = 2 << 20;

/// A chunk's memory, shared by the drive and the reads still sending from it.
#[derive(Clone)]
struct ChunkData(Arc<ChunkMem>);

impl AsRef<[u8]> for ChunkData {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// `len` bytes of anonymous memory, mapped on their own and aligned to `CHUNK`.
struct ChunkMem {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the memory is owned by the value alone (no aliasing pointer escapes but through
// `&`/`&mut` borrows of it), so it moves and is shared across threads as a `Box<[u8]>` would.
unsafe impl Send for ChunkMem {}
unsafe impl Sync for ChunkMem {}

/// What a mapping of `len` bytes spans: whole pages (4 KiB on x86-64; 16 or 64 KiB on some
/// Arm machines, where a 4 KiB-rounded end is not page-aligned and the slack after it could
/// not be unmapped).
fn mapped_len(len: usize) -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    len.next_multiple_of(usize::try_from(page).unwrap_or(4096).max(4096))
}

impl ChunkMem {
    /// `len` zero bytes, not yet touched: the kernel supplies zeroed pages at their first write
    /// (a chunk advised MADV_HUGEPAGE gets one 2 MiB page there, where the kernel allows).
    /// The allocator's memory had to be zeroed by hand, a second clearing of a page the kernel
    /// had just cleared (a C program doing each way's calls took 547 µs per new chunk that way
    /// and 403 µs mapped: medians of 5 alternated rounds of 256 chunks on the development VM).
    /// A copy-on-write copy (`copy_of`) now meets the kernel's clearing before its copy, where
    /// it used to copy into uncleared memory: rare (a write while a read holds the chunk).
    fn zeroed(len: usize) -> Option<ChunkMem> {
        if len == 0 {
            return None;
        }
        let size = mapped_len(len);
        // Mapped with a chunk's worth of slack, so that an aligned start lies inside; the slack
        // is unmapped at once.
        let span = size + CHUNK;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let head = (base as usize).next_multiple_of(CHUNK) - base as usize;
        let tail = span - head - size;
        // SAFETY: both ranges lie inside the mapping just made (page-aligned: the mapping,
        // CHUNK and `size` are; CHUNK is a multiple of every page size), and nothing refers to
        // them.
        unsafe {
            if head > 0 {
                libc::munmap(base, head);
            }
            if tail > 0 {
                libc::munmap(base.cast::<u8>().add(head + size).cast(), tail);
            }
        }
        // SAFETY: `head` stays inside the mapping.
        let ptr = NonNull::new(unsafe { base.cast::<u8>().add(head) })?;
        if len == CHUNK {
            // SAFETY: advice on memory this mapping owns, before anything touched it; where huge
            // pages are off or refused the chunk stays on small pages, so the result is ignored.
            unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_HUGEPAGE) };
        }
        Some(ChunkMem { ptr, len })
    }

    fn copy_of(src: &[u8]) -> Option<ChunkMem> {
        let mut mem = Self::zeroed(src.len())?;
        mem.copy_from_slice(src);
        Some(mem)
    }
}

impl std::ops::Deref for ChunkMem {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by `self` (see `alloc`'s callers).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for ChunkMem {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for ChunkMem {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `zeroed`, unmapped once; no borrow of it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), mapped_len(self.len)) };
    }
}

type Chunk = RwLock<Option<ChunkData>>;

pub struct RamDrive {
    info: DriveInfo,
    chunks: Box<[Chunk]>,
}

/// The part of a request that falls in one chunk.
struct Piece {
    chunk: usize,
    /// Offset inside the chunk.
    at: usize,
    len: usize,
    /// Offset inside the request.
    pos: usize,
}

impl RamDrive {
    pub fn new(capacity: u64, block_size: u32) -> Result<RamDrive, DriveError> {
        check_geometry(capacity, block_size)?;
        let count = usize::try_from(capacity.div_ceil(CHUNK as u64))
            .map_err(|_| DriveError::Unusable(format!("capacity {capacity} is too large")))?;
        let chunks = (0..count).map(|_| RwLock::new(None)).collect();
        let info = DriveInfo {
            kind: BackendKind::Ram,
            capacity,
            block_size,
            volatile_write_cache: false,
            path: None,
        };
        Ok(RamDrive { info, chunks })
    }

    /// Bytes of memory holding data (whole chunks).
    pub fn allocated_bytes(&self) -> u64 {
        let held = |c: &Chunk| {
            c.read()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
                .map_or(0, |d| d.0.len())
        };
        self.chunks.iter().map(|c| held(c) as u64).sum()
    }

    /// The last chunk is short when the capacity is not a whole number of chunks.
    fn chunk_len(&self, chunk: usize) -> usize {
        let start = chunk as u64 * CHUNK as u64;
        (self.info.capacity - start).min(CHUNK as u64) as usize
    }

    /// Splits `offset..offset + len` (already range-checked) at chunk boundaries.
    fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = Piece> {
        let end = offset + len;
        let mut cur = offset;
        std::iter::from_fn(move || {
            if cur >= end {
                return None;
            }
            let (chunk, at) = ((cur / CHUNK as u64) as usize, (cur % CHUNK as u64) as usize);
            let n = (CHUNK - at).min((end - cur) as usize);
            let piece = Piece {
                chunk,
                at,
                len: n,
                pos: (cur - offset) as usize,
            };
            cur += n as u64;
            Some(piece)
        })
    }

    fn do_read(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        check_range(&self.info, offset, len as u64)?;
        let mut pieces = self.pieces(offset, len as u64).peekable();
        if let Some(first) = pieces.next_if(|p| p.len == len) {
            // Within one chunk: share its memory.
            let chunk = self.chunks[first.chunk]
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            return Ok(match chunk.as_ref() {
                Some(data) => Bytes::from_owner(data.clone()).slice(first.at..first.at + len),
                None => zeroed_bytes(len),
            });
        }
        // Across chunks: gathered into one buffer, allocated only if some chunk holds data.
        let mut out: Option<BytesMut> = None;
        for p in pieces {
            let chunk = self.chunks[p.chunk]
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(data) = chunk.as_ref() {
                let out = out.get_or_insert_with(|| BytesMut::zeroed(len));
                out[p.pos..p.pos + p.len].copy_from_slice(&data.as_ref()[p.at..p.at + p.len]);
            }
        }
        Ok(out.map_or_else(|| zeroed_bytes(len), BytesMut::freeze))
    }

    /// Copied from the chunks straight into the caller's buffer.
    fn do_read_into(&self, offset: u64, mut buf: ReadBuf) -> Result<Bytes, DriveError> {
        check_range(&self.info, offset, buf.len() as u64)?;
        let out = buf.as_mut_slice();
        for p in self.pieces(offset, out.len() as u64) {
            let chunk = self.chunks[p.chunk]
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            let dst = &mut out[p.pos..p.pos + p.len];
            match chunk.as_ref() {
                Some(data) => dst.copy_from_slice(&data.as_ref()[p.at..p.at + p.len]),
                None => dst.fill(0),
            }
        }
        Ok(buf.filled())
    }

    fn do_write(&self, offset: u64, data: &[u8]) -> Result<(), DriveError> {
        check_range(&self.info, offset, data.len() as u64)?;
        let out_of_memory = || {
            let e = std::io::Error::from(std::io::ErrorKind::OutOfMemory);
            DriveError::io(offset, data.len() as u64, e)
        };
        for p in self.pieces(offset, data.len() as u64) {
            let mut chunk = self.chunks[p.chunk]
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let dst = writable(&mut chunk, self.chunk_len(p.chunk)).ok_or_else(out_of_memory)?;
            dst[p.at..p.at + p.len].copy_from_slice(&data[p.pos..p.pos + p.len]);
        }
        Ok(())
    }

    /// Frees chunks the range covers whole and zeroes the partly covered ones.
    fn do_zero(&self, offset: u64, len: u64) -> Result<(), DriveError> {
        check_range(&self.info, offset, len)?;
        for p in self.pieces(offset, len) {
            let whole = p.at == 0 && p.len == self.chunk_len(p.chunk);
            let mut chunk = self.chunks[p.chunk]
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if whole {
                *chunk = None;
            } else if chunk.is_some() {
                let data = writable(&mut chunk, self.chunk_len(p.chunk)).ok_or_else(|| {
                    let e = std::io::Error::from(std::io::ErrorKind::OutOfMemory);
                    DriveError::io(offset, len, e)
                })?;
                data[p.at..p.at + p.len].fill(0);
            }
        }
        Ok(())
    }
}

/// The chunk's memory for writing (the caller holds the chunk's write lock): allocated (zeroed)
/// on first use, copied first if a read still holds it. `None` if memory is exhausted.
fn writable(chunk: &mut Option<ChunkData>, len: usize) -> Option<&mut [u8]> {
    let data = match chunk.take() {
        None => ChunkData(Arc::new(ChunkMem::zeroed(len)?)),
        Some(data) if Arc::strong_count(&data.0) == 1 => data,
        Some(shared) => ChunkData(Arc::new(ChunkMem::copy_of(&shared.0)?)),
    };
    let data = chunk.insert(data);
    // Unique (no Weak is ever made): fresh, copied, or counted above; new sharers need the read
    // lock, and the caller holds the write lock.
    Arc::get_mut(&mut data.0).map(|b| &mut b[..])
}

impl Drive for RamDrive {
    fn info(&self) -> &DriveInfo {
        &self.info
    }

    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(std::future::ready(self.do_read(offset, len)))
    }

    fn read_into(&self, offset: u64, buf: ReadBuf) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(std::future::ready(self.do_read_into(offset, buf)))
    }

    fn write(&self, offset: u64, data: Bytes, _fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(std::future::ready(self.do_write(offset, &data)))
    }

    fn completes_at_once(&self) -> bool {
        true
    }

    fn read_now(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        self.do_read(offset, len)
    }

    fn read_into_now(&self, offset: u64, buf: ReadBuf) -> Result<Bytes, DriveError> {
        self.do_read_into(offset, buf)
    }

    fn write_now(&self, offset: u64, data: &[u8], _fua: bool) -> Result<(), DriveError> {
        self.do_write(offset, data)
    }

    /// Nothing to do: there is no volatile cache between a write and its storage.
    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(std::future::ready(self.do_zero(offset, len)))
    }

    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(std::future::ready(self.do_zero(offset, len)))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::testkit;
    use super::*;

    const MIB: u64 = 1 << 20;
    /// A chunk's size.
    const C: u64 = CHUNK as u64;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance_4k_blocks() {
        let drive = Arc::new(RamDrive::new(16 * MIB, 4096).unwrap());
        assert!(!drive.info().volatile_write_cache);
        testkit::conformance(drive).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance_512_blocks_short_last_chunk() {
        let drive = Arc::new(RamDrive::new(20 * MIB + 3 * 512, 512).unwrap());
        testkit::conformance(drive.clone()).await;
        let last = drive.info().capacity - 512;
        let block = testkit::pattern(3, 512);
        drive.write(last, block.clone(), false).await.unwrap();
        assert_eq!(drive.read(last, 512).await.unwrap(), block);
        assert_eq!(drive.read(20 * MIB, 1536).await.unwrap()[1024..], block[..]);
    }

    #[tokio::test]
    async fn huge_drive_costs_nothing_until_written() {
        let drive = RamDrive::new(64 << 30, 4096).unwrap();
        assert_eq!(drive.allocated_bytes(), 0);
        assert!(testkit::is_zero(
            &drive.read(10 << 30, MIB as usize).await.unwrap()
        ));
        assert_eq!(drive.allocated_bytes(), 0, "reads allocate nothing");
        drive
            .write(10 << 30, testkit::pattern(1, 4096), false)
            .await
            .unwrap();
        assert_eq!(drive.allocated_bytes(), C);
        // A partial deallocate zeroes in place; a whole-chunk one frees the chunk.
        drive.deallocate(10 << 30, 4096).await.unwrap();
        assert_eq!(drive.allocated_bytes(), C);
        assert!(testkit::is_zero(&drive.read(10 << 30, 4096).await.unwrap()));
        drive
            .write_zeroes((10 << 30) - 4096, C + 8192)
            .await
            .unwrap();
        assert_eq!(drive.allocated_bytes(), 0);
    }

    #[tokio::test]
    async fn reads_share_the_chunk_and_writes_never_change_them() {
        let drive = RamDrive::new(4 * C, 4096).unwrap();
        let old = testkit::pattern(1, 8192);
        drive.write(C, old.clone(), false).await.unwrap();
        let held = drive.read(C, 8192).await.unwrap();
        let again = drive.read(C + 4096, 4096).await.unwrap();
        assert_eq!(
            again.as_ptr(),
            held[4096..].as_ptr(),
            "zero-copy: the chunk's memory"
        );

        // A write while reads hold the chunk goes to a copy: what they got stays as it was.
        let new = testkit::pattern(2, 8192);
        drive.write(C, new.clone(), false).await.unwrap();
        assert_eq!(held, old);
        assert_eq!(again[..], old[4096..]);
        assert_eq!(drive.read(C, 8192).await.unwrap(), new);
        // Partial zeroing is a write too.
        drive.write_zeroes(C, 4096).await.unwrap();
        assert!(testkit::is_zero(&drive.read(C, 4096).await.unwrap()));
        assert_eq!(drive.read(C + 4096, 4096).await.unwrap()[..], new[4096..]);
        assert_eq!(held, old);
        assert_eq!(drive.allocated_bytes(), C);

        // With no read holding it, the chunk is written in place.
        drop((held, again));
        let before = drive.read(C, 4096).await.unwrap().as_ptr();
        drive.write(C + 8192, new.clone(), false).await.unwrap();
        assert_eq!(drive.read(C, 4096).await.unwrap().as_ptr(), before);
        // A read across two chunks is gathered.
        drive.write(C - 4096, new.clone(), false).await.unwrap();
        assert_eq!(drive.read(C - 4096, 8192).await.unwrap(), new);
    }

    #[test]
    fn chunks_are_aligned_and_zero_until_written() {
        let mut mem = ChunkMem::zeroed(CHUNK).unwrap();
        assert_eq!(
            mem.ptr.as_ptr() as usize % CHUNK,
            0,
            "a huge page can back it"
        );
        assert!(testkit::is_zero(&mem));
        mem[CHUNK - 1] = 7;
        let copy = ChunkMem::copy_of(&mem).unwrap();
        assert_eq!(copy[CHUNK - 1], 7);
        assert!(testkit::is_zero(&copy[..CHUNK - 1]));
        // A drive's short last chunk maps whole pages and shows only its length.
        let short = ChunkMem::zeroed(1536).unwrap();
        assert_eq!(short.len(), 1536);
        assert!(testkit::is_zero(&short));
        assert!(ChunkMem::zeroed(0).is_none());
    }

    #[test]
    fn bad_geometry_is_refused() {
        for (cap, bs) in [(0, 512), (1000, 512), (MIB, 100), (MIB, 8192)] {
            assert!(matches!(
                RamDrive::new(cap, bs),
                Err(DriveError::Unusable(_))
            ));
        }
    }
}
