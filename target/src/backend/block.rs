//! A drive on a block device (or a preallocated file), opened with O_DIRECT so I/O bypasses
//! the page cache, through io_uring with page-aligned and (when possible) registered buffers.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::aligned::{AlignedBuf, BufPool, ALIGN};
use super::engine::{Buf, Engine, EngineFile, IoMode};
use super::{
    check_geometry, check_range, BackendKind, BoxFuture, Drive, DriveError, DriveInfo, Lock,
    ReadBuf,
};

/// Registered buffers per drive. The kernel pins them and, for unprivileged users, charges
/// them to RLIMIT_MEMLOCK (often 8 MiB), so the pool is kept at 4 MiB; larger I/Os, or I/Os
/// beyond 32 in flight, use unregistered aligned buffers.
const POOL_BUFS: u16 = 32;
const POOL_BUF_SIZE: usize = 128 << 10;

/// `_IOR(0x12, 114, u64)`: the device size in bytes (not in the libc crate). The read
/// direction bit sits higher on most architectures than on the few listed.
const BLKGETSIZE64: libc::Ioctl = (IOC_READ | (8 << 16) | (0x12 << 8) | 114) as libc::Ioctl;
const IOC_READ: u32 = if cfg!(any(
    target_arch = "powerpc",
    target_arch = "powerpc64",
    target_arch = "mips",
    target_arch = "mips64",
    target_arch = "sparc64"
)) {
    2 << 29
} else {
    2 << 30
};

pub struct BlockDrive {
    io: EngineFile,
    /// The NVMe controller to ask for SMART data, when the device is an NVMe namespace.
    nvme_ctrl: Option<std::path::PathBuf>,
}

struct Geometry {
    capacity: u64,
    block_size: u32,
}

impl BlockDrive {
    /// Opens a block device (exclusively: it fails if the device is mounted or otherwise
    /// claimed) or a regular file, with O_DIRECT. Capacity and block size come from the
    /// device (or, for a file, its length and the filesystem's O_DIRECT alignment).
    pub fn open(path: &Path) -> Result<BlockDrive, DriveError> {
        BlockDrive::open_with(path, IoMode::Auto)
    }

    /// `open`, choosing how I/O is done.
    pub fn open_with(path: &Path, mode: IoMode) -> Result<BlockDrive, DriveError> {
        BlockDrive::open_locked(path, mode, Lock::Exclusive)
    }

    /// `open`, for one of a box's two I/O modules: the device is shared with the other one
    /// (on one machine, the device is not claimed; a file gets a shared lock).
    pub fn open_shared(path: &Path) -> Result<BlockDrive, DriveError> {
        BlockDrive::open_locked(path, IoMode::Auto, Lock::Module)
    }

    fn open_locked(path: &Path, mode: IoMode, lock: Lock) -> Result<BlockDrive, DriveError> {
        let meta = std::fs::metadata(path).map_err(|e| DriveError::open(path, e))?;
        let is_device = meta.file_type().is_block_device();
        if !is_device && !meta.is_file() {
            let msg = format!(
                "{} is neither a block device nor a regular file",
                path.display()
            );
            return Err(DriveError::Unusable(msg));
        }
        let file = open_direct(path, is_device, lock)?;
        let geometry = if is_device {
            device_geometry(&file)
        } else {
            file_geometry(&file)
        };
        let geo = geometry.map_err(|e| DriveError::open(path, e))?;
        check_geometry(geo.capacity, geo.block_size)?;
        let pool = BufPool::new(POOL_BUFS, POOL_BUF_SIZE).ok();
        let engine = Engine::new(
            mode,
            &path.display().to_string(),
            pool,
            geo.block_size as usize,
        )
        .map_err(DriveError::Unusable)?;
        let info = DriveInfo {
            kind: BackendKind::Block,
            capacity: geo.capacity,
            block_size: geo.block_size,
            // A device may have a write cache we cannot see; flush (fdatasync) sends it a
            // cache flush, which is cheap when there is none.
            volatile_write_cache: true,
            path: Some(path.to_path_buf()),
        };
        Ok(BlockDrive {
            io: EngineFile {
                info,
                file: Arc::new(file),
                engine,
            },
            nvme_ctrl: is_device
                .then(|| super::nvme_smart::controller_of(path))
                .flatten(),
        })
    }

    /// Whether I/O goes through io_uring (rather than the blocking pool).
    pub fn uses_io_uring(&self) -> bool {
        self.io.engine.is_uring()
    }

    /// Whether small I/Os use buffers registered with io_uring.
    pub fn uses_registered_buffers(&self) -> bool {
        self.io.engine.pool().is_some()
    }
}

fn open_direct(path: &Path, is_device: bool, lock: Lock) -> Result<File, DriveError> {
    // O_EXCL on a block device claims it: refused while mounted or held by another opener.
    let claim = is_device && lock == Lock::Exclusive;
    let flags = libc::O_DIRECT | if claim { libc::O_EXCL } else { 0 };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(path);
    let file = file.map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => io::Error::new(e.kind(), "the filesystem refuses O_DIRECT"),
        Some(libc::EBUSY) => io::Error::new(e.kind(), "device is in use (mounted?)"),
        _ => e,
    });
    let file = file.map_err(|e| DriveError::open(path, e))?;
    if !is_device {
        super::file::lock_file(path, &file, lock)?;
    }
    Ok(file)
}

fn ioctl_get<T: Default>(file: &File, request: libc::Ioctl) -> io::Result<T> {
    let mut value = T::default();
    // SAFETY: `request` is a read-only block ioctl writing one `T` into `value`.
    match unsafe { libc::ioctl(file.as_raw_fd(), request, &mut value as *mut T) } {
        0 => Ok(value),
        _ => Err(io::Error::last_os_error()),
    }
}

/// statx(STATX_DIOALIGN): (offset/length alignment, memory alignment) for O_DIRECT, if the
/// kernel (6.1+) reports them.
fn dio_alignment(file: &File) -> io::Result<Option<(u32, u32)>> {
    // SAFETY: statx fills a zeroed, properly sized buffer; the empty path with AT_EMPTY_PATH
    // names the descriptor itself.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_DIOALIGN,
            &mut stx,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let reported = stx.stx_mask & libc::STATX_DIOALIGN != 0;
    Ok(reported.then_some((stx.stx_dio_offset_align, stx.stx_dio_mem_align)))
}

fn device_geometry(file: &File) -> io::Result<Geometry> {
    let size: u64 = ioctl_get(file, BLKGETSIZE64)?;
    let block_size: libc::c_int = ioctl_get(file, libc::BLKSSZGET)?;
    let block_size =
        u32::try_from(block_size).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))?;
    let capacity = size / block_size.max(1) as u64 * block_size as u64;
    Ok(Geometry {
        capacity,
        block_size,
    })
}

/// A regular file: its length (rounded down to whole blocks), and the smallest block the
/// filesystem accepts for O_DIRECT (4096 when the kernel cannot tell us).
fn file_geometry(file: &File) -> io::Result<Geometry> {
    let len = file.metadata()?.len();
    let block_size = match dio_alignment(file) {
        Ok(Some((0, _))) => {
            let msg = "the filesystem does not support O_DIRECT for this file";
            return Err(io::Error::new(io::ErrorKind::Unsupported, msg));
        }
        Ok(Some((offset_align, _))) => offset_align.max(512),
        _ => ALIGN as u32,
    };
    let capacity = len / block_size as u64 * block_size as u64;
    Ok(Geometry {
        capacity,
        block_size,
    })
}

impl BlockDrive {
    async fn do_read(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        check_range(&self.io.info, offset, len as u64)?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        let io_err = |e| DriveError::io(offset, len as u64, e);
        let buf = AlignedBuf::alloc(self.io.engine.pool(), len).map_err(io_err)?;
        match self
            .io
            .engine
            .read_exact_at(&self.io.file, Buf::Aligned(buf), offset)
            .await
        {
            // Zero-copy: the Bytes owns the aligned buffer (a pool slot returns on drop).
            Ok(Buf::Aligned(buf)) => Ok(Bytes::from_owner(buf)),
            Ok(_) => Err(DriveError::Unusable(
                "engine returned a foreign buffer".into(),
            )),
            Err(e) => Err(io_err(e)),
        }
    }

    /// Into the caller's memory when it is aligned as O_DIRECT needs (an RDMA queue's buffers
    /// are); else read, then copied.
    async fn do_read_into(&self, offset: u64, mut buf: ReadBuf) -> Result<Bytes, DriveError> {
        check_range(&self.io.info, offset, buf.len() as u64)?;
        if !buf.is_aligned_to(ALIGN) {
            let data = self.do_read(offset, buf.len()).await?;
            buf.as_mut_slice().copy_from_slice(&data);
            return Ok(buf.filled());
        }
        self.io.read_into(offset, buf).await
    }

    async fn do_write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DriveError> {
        let len = data.len() as u64;
        check_range(&self.io.info, offset, len)?;
        if len == 0 {
            return if fua { self.io.flush().await } else { Ok(()) };
        }
        let io_err = |e| DriveError::io(offset, len, e);
        // O_DIRECT needs aligned memory, so the data is copied into a page-aligned (registered,
        // when the pool has a slot) buffer: the one copy the target makes on this path.
        // Writing straight from network buffers that were only DMA-aligned (512 bytes, as statx
        // reports for null_blk) corrupted 128 KiB writes that the 6.1 block layer had to split
        // (tests/interop block step); page-aligned buffers never did.
        let mut buf = AlignedBuf::alloc(self.io.engine.pool(), data.len()).map_err(io_err)?;
        buf.as_mut_slice().copy_from_slice(&data);
        let buf = Buf::Aligned(buf);
        // FUA is RWF_DSYNC, which O_DIRECT turns into a FUA write on the device.
        self.io
            .engine
            .write_all_at(&self.io.file, buf, offset, fua)
            .await
            .map_err(io_err)
    }
}

impl Drive for BlockDrive {
    fn info(&self) -> &DriveInfo {
        &self.io.info
    }

    fn smart_log(&self) -> Option<std::io::Result<fabrik_proto::nvme::log::SmartLog>> {
        let ctrl = self.nvme_ctrl.as_ref()?;
        Some(super::nvme_smart::read_smart_log(ctrl))
    }

    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(self.do_read(offset, len))
    }

    fn read_into(&self, offset: u64, buf: ReadBuf) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(self.do_read_into(offset, buf))
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.do_write(offset, data, fua))
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.io.flush())
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.io.write_zeroes(offset, len))
    }

    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(self.io.deallocate(offset, len))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::super::testkit;
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A temporary directory on a filesystem that accepts O_DIRECT (tmpfs may not). Panics
    /// if there is none: these tests must not pass without exercising O_DIRECT.
    fn direct_dir() -> tempfile::TempDir {
        let build = Path::new(env!("CARGO_MANIFEST_DIR")).join("../build");
        let candidates = [std::env::temp_dir(), PathBuf::from("/var/tmp"), build];
        for dir in &candidates {
            let Ok(tmp) = tempfile::tempdir_in(dir) else {
                continue;
            };
            let probe = tmp.path().join("probe");
            let made = File::create(&probe).and_then(|f| f.set_len(MIB));
            if made.is_ok() && BlockDrive::open(&probe).is_ok() {
                return tmp;
            }
        }
        panic!(
            "no directory among {candidates:?} supports O_DIRECT; cannot test the block backend"
        );
    }

    fn image(dir: &tempfile::TempDir, name: &str, len: u64) -> PathBuf {
        let path = dir.path().join(name);
        File::create(&path).unwrap().set_len(len).unwrap();
        path
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance_both_engines() {
        let dir = direct_dir();
        for (i, mode) in [IoMode::Auto, IoMode::Blocking].into_iter().enumerate() {
            let drive =
                BlockDrive::open_with(&image(&dir, &format!("img{i}"), 16 * MIB), mode).unwrap();
            assert_eq!(
                drive.uses_io_uring(),
                mode == IoMode::Auto && testkit::auto_uses_uring()
            );
            eprintln!(
                "{mode:?}: uring {}, registered buffers {}",
                drive.uses_io_uring(),
                drive.uses_registered_buffers()
            );
            testkit::conformance(Arc::new(drive)).await;
        }
    }

    #[tokio::test]
    async fn geometry_of_a_file() {
        let dir = direct_dir();
        let drive = BlockDrive::open(&image(&dir, "g", 8 * MIB + 4096 + 100)).unwrap();
        let info = drive.info();
        assert_eq!(info.kind, BackendKind::Block);
        assert!(info.volatile_write_cache);
        assert!(
            info.block_size == 512 || info.block_size == 4096,
            "{}",
            info.block_size
        );
        assert_eq!(
            info.capacity,
            8 * MIB + 4096,
            "rounded down to whole blocks"
        );
        let empty = BlockDrive::open(&image(&dir, "empty", 0));
        assert!(
            matches!(empty, Err(DriveError::Unusable(_))),
            "{:?}",
            empty.err()
        );
        let missing = BlockDrive::open(&dir.path().join("missing"));
        assert!(matches!(missing, Err(DriveError::Open { .. })));
        let not_a_file = BlockDrive::open(dir.path());
        assert!(matches!(not_a_file, Err(DriveError::Unusable(_))));
    }

    #[tokio::test]
    async fn aligned_and_unaligned_sources_and_zero_copy_reads() {
        let dir = direct_dir();
        let drive = BlockDrive::open(&image(&dir, "a", 16 * MIB)).unwrap();
        let data = testkit::pattern(11, 256 * 1024 + 1);
        // Offset 1 into the allocation: certainly not DMA-aligned, so it is copied.
        let unaligned = data.slice(1..);
        drive.write(0, unaligned.clone(), false).await.unwrap();
        // An AlignedBuf source is aligned, so it goes to the kernel as is.
        let mut aligned = AlignedBuf::new(unaligned.len()).unwrap();
        aligned
            .as_mut_slice()
            .copy_from_slice(&testkit::pattern(12, unaligned.len()));
        let aligned = Bytes::from_owner(aligned);
        drive.write(MIB, aligned.clone(), true).await.unwrap();
        for (off, want) in [(0, &unaligned), (MIB, &aligned)] {
            let got = drive.read(off, want.len()).await.unwrap();
            assert_eq!(&got, want);
            assert_eq!(
                got.as_ptr() as usize % ALIGN,
                0,
                "read returns the aligned buffer"
            );
        }
        // Reads from the pool return their buffers once the Bytes are gone.
        if let Some(pool) = drive.io.engine.pool() {
            let held: Vec<Bytes> =
                futures_util::future::try_join_all((0..40).map(|i| drive.read(i * 4096, 4096)))
                    .await
                    .unwrap();
            assert_eq!(pool.free_count(), 0, "the pool is used first");
            assert!(held.len() > POOL_BUFS as usize);
            drop(held);
            assert_eq!(pool.free_count(), POOL_BUFS as usize);
        }
    }

    #[tokio::test]
    async fn data_persists_across_reopen() {
        let dir = direct_dir();
        let path = image(&dir, "p", 8 * MIB);
        let data = testkit::pattern(3, 64 * 1024);
        {
            let drive = BlockDrive::open(&path).unwrap();
            drive.write(5 * MIB, data.clone(), false).await.unwrap();
            drive.flush().await.unwrap();
            assert!(
                matches!(BlockDrive::open(&path), Err(DriveError::Open { .. })),
                "locked"
            );
        }
        let drive = BlockDrive::open(&path).unwrap();
        assert_eq!(drive.read(5 * MIB, data.len()).await.unwrap(), data);
    }

    /// Destructive: set FABRIK_TEST_BLOCK_DEVICE to a scratch device (e.g. a loop device)
    /// of 16..=64 MiB and run with `--ignored`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[ignore]
    async fn real_block_device() {
        let dev =
            std::env::var_os("FABRIK_TEST_BLOCK_DEVICE").expect("FABRIK_TEST_BLOCK_DEVICE unset");
        let drive = BlockDrive::open(Path::new(&dev)).unwrap();
        eprintln!(
            "{:?}, uring {}, registered {}",
            drive.info(),
            drive.uses_io_uring(),
            drive.uses_registered_buffers()
        );
        assert!(
            matches!(
                BlockDrive::open(Path::new(&dev)),
                Err(DriveError::Open { .. })
            ),
            "O_EXCL"
        );
        let drive = Arc::new(drive);
        drive.write_zeroes(0, drive.info().capacity).await.unwrap();
        testkit::conformance(drive).await;
    }
}
