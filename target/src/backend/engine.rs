//! How the file and block backends do I/O without blocking the tokio runtime: through
//! io_uring (`uring.rs`) where the kernel allows it, otherwise with std positional I/O on
//! tokio's blocking pool. Also the fallocate-based zeroing both backends share.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use super::aligned::{AlignedBuf, BufPool};
use super::uring::Ring;
use super::ReadBuf;
use super::{check_range, DriveError, DriveInfo};

/// How a file or block drive performs I/O.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IoMode {
    /// io_uring if the kernel allows it, else the blocking pool (with a warning). Setting
    /// `FABRIK_NO_URING=1` in the environment forces the blocking pool.
    #[default]
    Auto,
    /// io_uring or fail to open.
    Uring,
    /// std positional I/O on tokio's blocking pool.
    Blocking,
}

/// A buffer an operation owns while the kernel uses it.
pub(crate) enum Buf {
    Vec(Vec<u8>),
    /// Write source only: `Bytes` cannot be written into.
    Bytes(Bytes),
    Aligned(AlignedBuf),
    /// Read destination lent by the caller (`Drive::read_into`).
    Into(ReadBuf),
}

impl Buf {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Buf::Vec(v) => v,
            Buf::Bytes(b) => b,
            Buf::Aligned(a) => a.as_slice(),
            Buf::Into(r) => r.as_slice(),
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        match self {
            Buf::Vec(v) => Some(v),
            Buf::Bytes(_) => None,
            Buf::Aligned(a) => Some(a.as_mut_slice()),
            Buf::Into(r) => Some(r.as_mut_slice()),
        }
    }
}

/// Ring size: operations in flight per drive before further ones queue in the ring thread.
const RING_ENTRIES: u32 = 256;

pub(crate) enum Engine {
    Uring(Ring),
    /// The blocking pool; the alignment O_DIRECT needs (1 for buffered files).
    Blocking(usize),
}

/// A transfer that stopped short of the whole buffer resumes where it stopped; under O_DIRECT
/// that place must be block aligned (the buffer is, so the rest is if the part done is whole
/// blocks), or the kernel refuses it. A device that returns part of a block is failing.
pub(crate) fn check_resume(done: usize, align: usize) -> io::Result<()> {
    if align > 1 && !done.is_multiple_of(align) {
        return Err(io::Error::other(format!(
            "short O_DIRECT transfer: {done} bytes is not a whole number of {align}-byte blocks"
        )));
    }
    Ok(())
}

impl Engine {
    /// Starts an engine for drive `name`. `pool` buffers are registered with the ring when
    /// possible; `Engine::pool` tells whether they were.
    /// `align`: the block size of an O_DIRECT file (1 for buffered I/O).
    pub(crate) fn new(
        mode: IoMode,
        name: &str,
        pool: Option<Arc<BufPool>>,
        align: usize,
    ) -> Result<Engine, String> {
        let forced_off = std::env::var_os("FABRIK_NO_URING").is_some_and(|v| v != "0");
        match mode {
            IoMode::Blocking => Ok(Engine::Blocking(align)),
            IoMode::Auto if forced_off => {
                tracing::info!(drive = name, "FABRIK_NO_URING is set; using blocking I/O");
                Ok(Engine::Blocking(align))
            }
            IoMode::Uring => Ring::new(name, RING_ENTRIES, pool, align)
                .map(Engine::Uring)
                .map_err(|e| format!("io_uring unavailable: {e}")),
            IoMode::Auto => match Ring::new(name, RING_ENTRIES, pool, align) {
                Ok(ring) => Ok(Engine::Uring(ring)),
                Err(e) => {
                    tracing::warn!(
                        drive = name,
                        "io_uring unavailable ({e}); using blocking I/O"
                    );
                    Ok(Engine::Blocking(align))
                }
            },
        }
    }

    pub(crate) fn is_uring(&self) -> bool {
        matches!(self, Engine::Uring(_))
    }

    /// The registered buffer pool, if io_uring accepted it.
    pub(crate) fn pool(&self) -> Option<&Arc<BufPool>> {
        match self {
            Engine::Uring(ring) => ring.pool(),
            Engine::Blocking(_) => None,
        }
    }

    /// Fills all of `buf` from `offset`; returns it filled.
    pub(crate) async fn read_exact_at(
        &self,
        file: &Arc<File>,
        mut buf: Buf,
        offset: u64,
    ) -> io::Result<Buf> {
        let ring = match self {
            Engine::Uring(ring) => ring,
            &Engine::Blocking(align) => {
                let file = file.clone();
                return blocking(move || {
                    let dst = buf.as_mut_slice().ok_or(io::ErrorKind::InvalidInput)?;
                    pread_all(&file, dst, offset, align).map(|()| buf)
                })
                .await;
            }
        };
        ring.transfer(file, buf, offset, None).await
    }

    /// Writes all of `buf` at `offset`; with `dsync` (RWF_DSYNC) the data is durable on return.
    pub(crate) async fn write_all_at(
        &self,
        file: &Arc<File>,
        buf: Buf,
        offset: u64,
        dsync: bool,
    ) -> io::Result<()> {
        let ring = match self {
            Engine::Uring(ring) => ring,
            &Engine::Blocking(align) => {
                let file = file.clone();
                return blocking(move || pwrite_all(&file, buf.as_slice(), offset, dsync, align))
                    .await;
            }
        };
        ring.transfer(file, buf, offset, Some(dsync))
            .await
            .map(drop)
    }

    pub(crate) async fn fdatasync(&self, file: &Arc<File>) -> io::Result<()> {
        let Engine::Uring(ring) = self else {
            let file = file.clone();
            return blocking(move || file.sync_data()).await;
        };
        ring.fdatasync(file).await
    }

    /// fallocate(2) with `mode` (FALLOC_FL_*) over `offset..offset + len`.
    pub(crate) async fn fallocate(
        &self,
        file: &Arc<File>,
        mode: i32,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        let Engine::Uring(ring) = self else {
            let file = file.clone();
            return blocking(move || fallocate(&file, mode, offset, len)).await;
        };
        ring.fallocate(file, mode, offset, len).await
    }

    /// Deallocates a range so it reads zeros: PUNCH_HOLE frees the space (on a block device
    /// the kernel makes it a write-zeroes with unmap, which guarantees the zeros); where that
    /// is unsupported, zero the range instead.
    pub(crate) async fn punch_hole(
        &self,
        file: &Arc<File>,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        match self.fallocate(file, mode, offset, len).await {
            Err(e) if unsupported(&e) => self.zero_range(file, offset, len).await,
            other => other,
        }
    }

    /// Zeroes a range. ZERO_RANGE keeps the blocks allocated (NVMe Write Zeroes need not
    /// deallocate; on a block device it is what BLKZEROOUT does); failing that PUNCH_HOLE;
    /// failing that, plain writes of zeros.
    pub(crate) async fn zero_range(
        &self,
        file: &Arc<File>,
        offset: u64,
        len: u64,
    ) -> io::Result<()> {
        let keep = libc::FALLOC_FL_KEEP_SIZE;
        for mode in [
            libc::FALLOC_FL_ZERO_RANGE | keep,
            libc::FALLOC_FL_PUNCH_HOLE | keep,
        ] {
            match self.fallocate(file, mode, offset, len).await {
                Err(e) if unsupported(&e) => continue,
                other => return other,
            }
        }
        let mut done = 0;
        while done < len {
            // The shared zero buffer is page-aligned, so this works under O_DIRECT too.
            let n = (len - done).min(super::ZEROS_LEN as u64) as usize;
            let zeros = Buf::Bytes(super::zeroed_bytes(n));
            self.write_all_at(file, zeros, offset + done, false).await?;
            done += n as u64;
        }
        Ok(())
    }
}

/// The operations the file and block backends share: both are a file descriptor driven by an
/// `Engine`, with the geometry checks of `check_range` in front.
pub(crate) struct EngineFile {
    pub(crate) info: DriveInfo,
    pub(crate) file: Arc<File>,
    pub(crate) engine: Engine,
}

impl EngineFile {
    /// Reads into the caller's memory in place (`Drive::read_into`): the data, where it lies.
    pub(crate) async fn read_into(&self, offset: u64, buf: ReadBuf) -> Result<Bytes, DriveError> {
        let len = buf.len() as u64;
        check_range(&self.info, offset, len)?;
        match self
            .engine
            .read_exact_at(&self.file, Buf::Into(buf), offset)
            .await
        {
            Ok(Buf::Into(buf)) => Ok(buf.filled()),
            Ok(_) => Err(DriveError::Unusable(
                "engine returned a foreign buffer".into(),
            )),
            Err(e) => Err(DriveError::io(offset, len, e)),
        }
    }

    pub(crate) async fn flush(&self) -> Result<(), DriveError> {
        let res = self.engine.fdatasync(&self.file).await;
        res.map_err(|e| DriveError::io(0, self.info.capacity, e))
    }

    pub(crate) async fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), DriveError> {
        check_range(&self.info, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let res = self.engine.zero_range(&self.file, offset, len).await;
        res.map_err(|e| DriveError::io(offset, len, e))
    }

    /// Not BLKDISCARD on devices: a discarded range may read back as old data, and the trait
    /// promises zeros; `punch_hole` guarantees them.
    pub(crate) async fn deallocate(&self, offset: u64, len: u64) -> Result<(), DriveError> {
        check_range(&self.info, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let res = self.engine.punch_hole(&self.file, offset, len).await;
        res.map_err(|e| DriveError::io(offset, len, e))
    }
}

/// Errors after which the same request is simply tried again.
pub(crate) fn retryable(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    )
}

fn unsupported(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// Runs `f` on tokio's blocking pool so the runtime's workers never wait on the disk.
async fn blocking<T, F>(f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(io::Error::other)?
}

/// Fills `dst` from `offset`, resuming after short reads (block aligned under O_DIRECT).
fn pread_all(file: &File, dst: &mut [u8], offset: u64, align: usize) -> io::Result<()> {
    let mut done = 0;
    while done < dst.len() {
        match file.read_at(&mut dst[done..], offset + done as u64) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                done += n;
                check_resume(done, align)?;
            }
            Err(e) if retryable(&e) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn pwrite_all(
    file: &File,
    mut data: &[u8],
    mut offset: u64,
    dsync: bool,
    align: usize,
) -> io::Result<()> {
    let flags = if dsync { libc::RWF_DSYNC } else { 0 };
    let mut done = 0;
    while !data.is_empty() {
        let iov = libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: data.len(),
        };
        // SAFETY: `iov` describes `data`, which outlives the call.
        let n = unsafe { libc::pwritev2(file.as_raw_fd(), &iov, 1, offset as i64, flags) };
        match n {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n if n > 0 => {
                data = &data[n as usize..];
                offset += n as u64;
                done += n as usize;
                if !data.is_empty() {
                    check_resume(done, align)?;
                }
            }
            _ => match io::Error::last_os_error() {
                e if retryable(&e) => {}
                e => return Err(e),
            },
        }
    }
    Ok(())
}

fn fallocate(file: &File, mode: i32, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain syscall on a descriptor we own.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as i64, len as i64) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::check_resume;

    #[test]
    fn an_o_direct_transfer_resumes_only_at_a_block_boundary() {
        assert!(check_resume(4096, 4096).is_ok());
        assert!(check_resume(8192, 512).is_ok());
        assert!(
            check_resume(1000, 512).is_err(),
            "part of a block: not resumed"
        );
        assert!(
            check_resume(1000, 1).is_ok(),
            "buffered I/O resumes anywhere"
        );
    }
}
