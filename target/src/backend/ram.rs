//! A drive in process memory, for benchmarks and tests. Storage is sparse: 1 MiB chunks are
//! allocated on first write, so a huge drive costs (almost) nothing until written.

use std::alloc::{self, Layout};
use std::sync::{PoisonError, RwLock};

use bytes::{Bytes, BytesMut};

use super::{
    check_geometry, check_range, zeroed_bytes, BackendKind, BoxFuture, Drive, DriveError, DriveInfo,
};

/// Allocation unit. A multiple of every block size, so a block never straddles two chunks
/// and each block is written under one lock (block-level atomicity).
const CHUNK: usize = 1 << 20;

type Chunk = RwLock<Option<Box<[u8]>>>;

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
                .map_or(0, |d| d.len())
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
        // Allocate the output once, and only if some chunk in the range holds data.
        let mut out: Option<BytesMut> = None;
        for p in self.pieces(offset, len as u64) {
            let chunk = self.chunks[p.chunk]
                .read()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(data) = chunk.as_deref() {
                let out = out.get_or_insert_with(|| BytesMut::zeroed(len));
                out[p.pos..p.pos + p.len].copy_from_slice(&data[p.at..p.at + p.len]);
            }
        }
        Ok(out.map_or_else(|| zeroed_bytes(len), BytesMut::freeze))
    }

    fn do_write(&self, offset: u64, data: &[u8]) -> Result<(), DriveError> {
        check_range(&self.info, offset, data.len() as u64)?;
        for p in self.pieces(offset, data.len() as u64) {
            let mut chunk = self.chunks[p.chunk]
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            if chunk.is_none() {
                let len = self.chunk_len(p.chunk);
                let fresh = zeroed_chunk(len).ok_or_else(|| {
                    let e = std::io::Error::from(std::io::ErrorKind::OutOfMemory);
                    DriveError::io(offset, data.len() as u64, e)
                })?;
                *chunk = Some(fresh);
            }
            if let Some(dst) = chunk.as_deref_mut() {
                dst[p.at..p.at + p.len].copy_from_slice(&data[p.pos..p.pos + p.len]);
            }
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
            match chunk.as_deref_mut() {
                _ if whole => *chunk = None,
                Some(data) => data[p.at..p.at + p.len].fill(0),
                None => {}
            }
        }
        Ok(())
    }
}

/// A chunk of `len` zero bytes from calloc: the kernel hands out zero pages lazily, so a
/// chunk costs memory only for the pages actually written. `None` if memory is exhausted.
fn zeroed_chunk(len: usize) -> Option<Box<[u8]>> {
    let layout = Layout::array::<u8>(len).ok().filter(|l| l.size() > 0)?;
    // SAFETY: `layout` has a non-zero size.
    let ptr = unsafe { alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        return None;
    }
    // SAFETY: `ptr` holds `len` initialised bytes allocated with the layout `Box<[u8]>` frees with.
    Some(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, len)) })
}

impl Drive for RamDrive {
    fn info(&self) -> &DriveInfo {
        &self.info
    }

    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(std::future::ready(self.do_read(offset, len)))
    }

    fn write(&self, offset: u64, data: Bytes, _fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(std::future::ready(self.do_write(offset, &data)))
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
        assert_eq!(drive.allocated_bytes(), MIB);
        // A partial deallocate zeroes in place; a whole-chunk one frees the chunk.
        drive.deallocate(10 << 30, 4096).await.unwrap();
        assert_eq!(drive.allocated_bytes(), MIB);
        assert!(testkit::is_zero(&drive.read(10 << 30, 4096).await.unwrap()));
        drive
            .write_zeroes((10 << 30) - 4096, MIB + 8192)
            .await
            .unwrap();
        assert_eq!(drive.allocated_bytes(), 0);
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
