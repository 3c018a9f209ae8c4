//! Drive backends: the storage behind a namespace. One trait, four implementations:
//! `file` (sparse file, the default), `block` (block device, O_DIRECT through io_uring),
//! `ram` and `null` (benchmarks).

mod aligned;
pub mod block;
mod engine;
pub mod file;
pub mod guard;
pub mod null;
mod nvme_smart;
pub mod ram;
mod reactor_ring;
pub(crate) mod read_buf;
#[cfg(test)]
pub(crate) mod testkit;
mod uring;

pub use engine::IoMode;
pub use read_buf::{Lender, ReadBuf};

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use bytes::Bytes;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

#[derive(Debug, thiserror::Error)]
pub enum DriveError {
    #[error("I/O error at byte {offset} (+{len}): {source}")]
    Io {
        offset: u64,
        len: u64,
        source: std::io::Error,
    },
    #[error("range {offset}+{len} is beyond the drive's {capacity} bytes")]
    OutOfRange {
        offset: u64,
        len: u64,
        capacity: u64,
    },
    #[error("offset {offset} or length {len} is not a multiple of the {block_size}-byte block")]
    Unaligned {
        offset: u64,
        len: u64,
        block_size: u32,
    },
    #[error("cannot open drive {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("drive is not usable: {0}")]
    Unusable(String),
    /// The drive lost a write earlier and refuses changes until an operator clears the fault.
    #[error("the drive is read-only since a write was lost ({})", .0.cause)]
    Failed(guard::Fault),
}

/// Which backend a drive uses.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BackendKind {
    File,
    Block,
    Ram,
    Null,
}

impl BackendKind {
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::File => "file",
            BackendKind::Block => "block",
            BackendKind::Ram => "ram",
            BackendKind::Null => "null",
        }
    }
}

/// What a drive is, fixed when it is opened.
/// Whom a drive's file or device is shared with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lock {
    /// Nobody: this process serves it alone.
    Exclusive,
    /// The box's other I/O module, which serves the same drive (`crate::module`).
    Module,
}

#[derive(Clone, Debug)]
pub struct DriveInfo {
    pub kind: BackendKind,
    /// Bytes; a multiple of `block_size`.
    pub capacity: u64,
    /// Logical block size in bytes (512 or 4096).
    pub block_size: u32,
    /// True if acknowledged writes may sit in a volatile cache until `flush` (reported as VWC).
    pub volatile_write_cache: bool,
    /// Backing path, if any.
    pub path: Option<PathBuf>,
}

/// The storage behind one namespace. Offsets and lengths are in bytes and are multiples of
/// `block_size`; implementations check ranges against `capacity` and return `OutOfRange`.
/// All methods may be called concurrently from many queues.
pub trait Drive: Send + Sync + 'static {
    fn info(&self) -> &DriveInfo;

    /// The device's own SMART / health log, for drives that have one (NVMe namespaces behind
    /// the block backend); None otherwise (files, RAM, null: fabrikd reports what it tracks
    /// itself instead; see `Manager::drive_health`, the one place health is made). Blocking
    /// (an ioctl).
    fn smart_log(&self) -> Option<std::io::Result<fabrik_proto::nvme::log::SmartLog>> {
        None
    }

    /// Why the drive refuses writes since it lost one (see `guard`); None while writable.
    fn fault(&self) -> Option<guard::Fault> {
        None
    }

    /// The operator's word that the drive may take writes again: the fault it had, if any.
    fn clear_fault(&self) -> Option<guard::Fault> {
        None
    }

    /// Reads `len` bytes at `offset`. Never-written ranges read as zeros.
    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>>;

    /// Reads `buf.len()` bytes at `offset` into `buf` (memory the caller lent, such as an
    /// NVMe/RDMA queue's registered buffer): the data, where `buf` lies. Drives that can, read
    /// straight into it; this default reads, then copies.
    fn read_into(&self, offset: u64, mut buf: ReadBuf) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(async move {
            let data = self.read(offset, buf.len()).await?;
            buf.as_mut_slice().copy_from_slice(&data);
            Ok(buf.filled())
        })
    }

    /// Writes `data` at `offset`. With `fua`, returns only once the data is durable.
    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, Result<(), DriveError>>;

    /// Whether reads and writes complete at once, in the calling thread (memory: ram, null).
    /// The I/O path then calls `read_now`, `read_into_now` and `write_now` instead of awaiting
    /// `read`, `read_into` and `write`: no future is made for the command.
    fn completes_at_once(&self) -> bool {
        false
    }

    /// `read`, done at once (see `completes_at_once`).
    fn read_now(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        let _ = (offset, len);
        Err(DriveError::Unusable(
            "the drive does not read at once".into(),
        ))
    }

    /// `read_into`, done at once (see `completes_at_once`).
    fn read_into_now(&self, offset: u64, buf: ReadBuf) -> Result<Bytes, DriveError> {
        let _ = (offset, buf);
        Err(DriveError::Unusable(
            "the drive does not read at once".into(),
        ))
    }

    /// `write`, done at once (see `completes_at_once`).
    fn write_now(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), DriveError> {
        let _ = (offset, data, fua);
        Err(DriveError::Unusable(
            "the drive does not write at once".into(),
        ))
    }

    /// Makes every completed write durable (fdatasync or equivalent; a no-op without a volatile cache).
    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>>;

    /// Zeroes a range (reads return zeros afterwards).
    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>>;

    /// Deallocates a range (TRIM): afterwards it reads as zeros and, where possible, frees space.
    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>>;
}

/// Checks `offset`/`len` against the drive's geometry; shared by every implementation.
pub fn check_range(info: &DriveInfo, offset: u64, len: u64) -> Result<(), DriveError> {
    let bs = info.block_size as u64;
    if !offset.is_multiple_of(bs) || !len.is_multiple_of(bs) {
        return Err(DriveError::Unaligned {
            offset,
            len,
            block_size: info.block_size,
        });
    }
    match offset.checked_add(len) {
        Some(end) if end <= info.capacity => Ok(()),
        _ => Err(DriveError::OutOfRange {
            offset,
            len,
            capacity: info.capacity,
        }),
    }
}

/// Checks the geometry a drive is created with: a block size of 512..=4096 bytes (a power of
/// two) and a non-empty capacity made of whole blocks.
pub(crate) fn check_geometry(capacity: u64, block_size: u32) -> Result<(), DriveError> {
    if !block_size.is_power_of_two() || !(512..=4096).contains(&block_size) {
        return Err(DriveError::Unusable(format!(
            "block size {block_size} is not 512, 1024, 2048 or 4096"
        )));
    }
    // A power of two by now, so a mask tests divisibility.
    if capacity == 0 || capacity & (block_size as u64 - 1) != 0 {
        return Err(DriveError::Unusable(format!(
            "capacity {capacity} is not a positive multiple of the {block_size}-byte block"
        )));
    }
    Ok(())
}

impl DriveError {
    pub(crate) fn io(offset: u64, len: u64, source: std::io::Error) -> DriveError {
        DriveError::Io {
            offset,
            len,
            source,
        }
    }

    pub(crate) fn open(path: &std::path::Path, source: std::io::Error) -> DriveError {
        DriveError::Open {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Size of the shared zero buffer.
pub(crate) const ZEROS_LEN: usize = 1 << 20;

/// Page-aligned so it can also be the source of O_DIRECT writes.
#[repr(C, align(4096))]
struct Zeros([u8; ZEROS_LEN]);

/// Lives in .bss: costs no memory until read, and reading maps the kernel's zero page.
static ZEROS: Zeros = Zeros([0; ZEROS_LEN]);

/// `len` zero bytes, sharing one static buffer when `len <= ZEROS_LEN`.
pub(crate) fn zeroed_bytes(len: usize) -> Bytes {
    match ZEROS.0.get(..len) {
        Some(zeros) => Bytes::from_static(zeros),
        None => Bytes::from(vec![0u8; len]),
    }
}
