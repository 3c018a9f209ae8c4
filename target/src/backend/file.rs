//! A drive kept in a sparse regular file, through the page cache (hence a volatile write
//! cache that `flush` makes durable with fdatasync).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::engine::{Buf, Engine, EngineFile, IoMode};
use super::{
    check_geometry, check_range, BackendKind, BoxFuture, Drive, DriveError, DriveInfo, Lock,
    ReadBuf,
};

pub struct FileDrive {
    io: EngineFile,
}

impl FileDrive {
    /// Opens (creating it and its parent directories if missing) the file at `path` as a
    /// drive of `capacity` bytes. The file is sparse: it grows with `set_len`, never with
    /// preallocation. Existing data is kept; a file longer than `capacity` is refused rather
    /// than cut.
    pub fn open(path: &Path, capacity: u64, block_size: u32) -> Result<FileDrive, DriveError> {
        FileDrive::open_with(path, capacity, block_size, IoMode::Auto)
    }

    /// `open`, choosing how I/O is done.
    pub fn open_with(
        path: &Path,
        capacity: u64,
        block_size: u32,
        mode: IoMode,
    ) -> Result<FileDrive, DriveError> {
        FileDrive::open_locked(path, capacity, block_size, mode, Lock::Exclusive)
    }

    /// `open`, for one of a box's two I/O modules: the file is shared with the other one.
    pub fn open_shared(
        path: &Path,
        capacity: u64,
        block_size: u32,
    ) -> Result<FileDrive, DriveError> {
        FileDrive::open_locked(path, capacity, block_size, IoMode::Auto, Lock::Module)
    }

    fn open_locked(
        path: &Path,
        capacity: u64,
        block_size: u32,
        mode: IoMode,
        lock: Lock,
    ) -> Result<FileDrive, DriveError> {
        check_geometry(capacity, block_size)?;
        let file = open_file(path, lock)?;
        size_file(path, &file, capacity)?;
        let engine = Engine::new(mode, &path.display().to_string(), None, 1)
            .map_err(DriveError::Unusable)?;
        let info = DriveInfo {
            kind: BackendKind::File,
            capacity,
            block_size,
            volatile_write_cache: true,
            path: Some(path.to_path_buf()),
        };
        Ok(FileDrive {
            io: EngineFile {
                info,
                file: Arc::new(file),
                engine,
            },
        })
    }

    /// Whether I/O goes through io_uring (rather than the blocking pool).
    pub fn uses_io_uring(&self) -> bool {
        self.io.engine.is_uring()
    }
}

fn open_file(path: &Path, lock: Lock) -> Result<File, DriveError> {
    let err = |e| DriveError::open(path, e);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::files::create_private_dir(dir).map_err(err)?;
    }
    let (file, _) = crate::files::open_or_create_private(path, |_| {}).map_err(err)?;
    if !file.metadata().map_err(err)?.is_file() {
        return Err(DriveError::Unusable(format!(
            "{} is not a regular file (use the block backend for devices)",
            path.display()
        )));
    }
    lock_file(path, &file, lock)?;
    Ok(file)
}

/// Two targets serving one file would corrupt it, so a drive holds a flock on its file for as
/// long as the descriptor is open: exclusive, or shared by the two I/O modules of a box (which
/// write through to it both, and keep nothing of it in memory), whom a target that is not a
/// module still cannot join.
pub(super) fn lock_file(path: &Path, file: &File, lock: Lock) -> Result<(), DriveError> {
    let how = match lock {
        Lock::Exclusive => libc::LOCK_EX,
        Lock::Module => libc::LOCK_SH,
    };
    // SAFETY: plain syscall on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), how | libc::LOCK_NB) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    let e = match (e.kind(), lock) {
        (io::ErrorKind::WouldBlock, Lock::Exclusive) => {
            io::Error::new(
                e.kind(),
                "file is in use by another drive, or by the I/O modules of a box",
            )
        }
        (io::ErrorKind::WouldBlock, Lock::Module) => io::Error::new(
            e.kind(),
            "file is in use by a target that is not an I/O module (only the two modules of a box share a drive)",
        ),
        _ => e,
    };
    Err(DriveError::open(path, e))
}

/// Grows the file to `capacity` (sparse); refuses to shrink it.
fn size_file(path: &Path, file: &File, capacity: u64) -> Result<(), DriveError> {
    let len = file
        .metadata()
        .map_err(|e| DriveError::open(path, e))?
        .len();
    if len > capacity {
        return Err(DriveError::Unusable(format!(
            "{} holds {len} bytes, more than the configured capacity {capacity}; \
             refusing to cut data (raise the capacity or truncate the file by hand)",
            path.display()
        )));
    }
    if len < capacity {
        file.set_len(capacity)
            .map_err(|e| DriveError::open(path, e))?;
    }
    Ok(())
}

impl FileDrive {
    async fn do_read(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        check_range(&self.io.info, offset, len as u64)?;
        if len == 0 {
            return Ok(Bytes::new());
        }
        // vec![0; n] comes from calloc: large ones are fresh zero pages, not a memset.
        let buf = Buf::Vec(vec![0u8; len]);
        match self
            .io
            .engine
            .read_exact_at(&self.io.file, buf, offset)
            .await
        {
            Ok(Buf::Vec(v)) => Ok(Bytes::from(v)),
            Ok(_) => Err(DriveError::Unusable(
                "engine returned a foreign buffer".into(),
            )),
            Err(e) => Err(DriveError::io(offset, len as u64, e)),
        }
    }

    async fn do_write(&self, offset: u64, data: Bytes, fua: bool) -> Result<(), DriveError> {
        let len = data.len() as u64;
        check_range(&self.io.info, offset, len)?;
        if len == 0 {
            return if fua { self.io.flush().await } else { Ok(()) };
        }
        // `Bytes` memory does not move, so the kernel can read it in place. FUA is RWF_DSYNC:
        // durable on completion, syncing only this write's range rather than the whole file.
        let res = self
            .io
            .engine
            .write_all_at(&self.io.file, Buf::Bytes(data), offset, fua)
            .await;
        res.map_err(|e| DriveError::io(offset, len, e))
    }
}

impl Drive for FileDrive {
    fn info(&self) -> &DriveInfo {
        &self.io.info
    }

    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(self.do_read(offset, len))
    }

    fn read_into(&self, offset: u64, buf: ReadBuf) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        // A buffered file needs no alignment: the engine fills the memory in place.
        Box::pin(self.io.read_into(offset, buf))
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
    use std::os::unix::fs::MetadataExt;

    use super::super::testkit;
    use super::*;

    const MIB: u64 = 1 << 20;

    fn open(dir: &tempfile::TempDir, cap: u64, mode: IoMode) -> FileDrive {
        FileDrive::open_with(&dir.path().join("d/disk.img"), cap, 4096, mode).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn conformance_both_engines() {
        for mode in [IoMode::Auto, IoMode::Blocking] {
            let dir = tempfile::tempdir().unwrap();
            let drive = Arc::new(open(&dir, 16 * MIB, mode));
            assert_eq!(
                drive.uses_io_uring(),
                mode == IoMode::Auto && testkit::auto_uses_uring()
            );
            assert!(drive.info().volatile_write_cache);
            testkit::conformance(drive).await;
        }
    }

    #[tokio::test]
    async fn io_uring_is_used_where_the_kernel_allows_it() {
        let dir = tempfile::tempdir().unwrap();
        match FileDrive::open_with(&dir.path().join("x"), MIB, 512, IoMode::Uring) {
            Ok(drive) => assert!(drive.uses_io_uring()),
            Err(e) => assert!(
                !testkit::uring_works(),
                "io_uring works but open failed: {e}"
            ),
        }
    }

    #[tokio::test]
    async fn data_persists_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let data = testkit::pattern(7, 64 * 1024);
        {
            let drive = open(&dir, 8 * MIB, IoMode::Auto);
            drive.write(3 * MIB, data.clone(), false).await.unwrap();
            drive.flush().await.unwrap();
        }
        let drive = open(&dir, 8 * MIB, IoMode::Auto);
        assert_eq!(drive.read(3 * MIB, data.len()).await.unwrap(), data);
        // Growing keeps the data; the new tail reads zeros.
        drop(drive);
        let drive = open(&dir, 16 * MIB, IoMode::Auto);
        assert_eq!(drive.read(3 * MIB, data.len()).await.unwrap(), data);
        assert!(testkit::is_zero(
            &drive.read(15 * MIB, MIB as usize).await.unwrap()
        ));
    }

    #[tokio::test]
    async fn refuses_to_shrink() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(&dir, 8 * MIB, IoMode::Auto));
        let err = FileDrive::open(&dir.path().join("d/disk.img"), 4 * MIB, 4096);
        assert!(
            matches!(err, Err(DriveError::Unusable(_))),
            "{:?}",
            err.err()
        );
        let len = std::fs::metadata(dir.path().join("d/disk.img"))
            .unwrap()
            .len();
        assert_eq!(len, 8 * MIB, "file left untouched");
    }

    #[tokio::test]
    async fn stays_sparse() {
        let dir = tempfile::tempdir().unwrap();
        let drive = open(&dir, 1 << 30, IoMode::Auto);
        drive
            .write(512 * MIB, testkit::pattern(1, 4096), true)
            .await
            .unwrap();
        let meta = std::fs::metadata(dir.path().join("d/disk.img")).unwrap();
        assert_eq!(meta.len(), 1 << 30);
        // st_blocks counts 512-byte units; one 4 KiB block (plus some metadata) is allocated.
        assert!(
            meta.blocks() * 512 <= 64 * 1024,
            "{} bytes allocated",
            meta.blocks() * 512
        );
    }

    #[tokio::test]
    async fn deallocate_frees_space() {
        let dir = tempfile::tempdir().unwrap();
        let drive = open(&dir, 8 * MIB, IoMode::Auto);
        drive
            .write(0, testkit::pattern(2, 4 * MIB as usize), false)
            .await
            .unwrap();
        drive.flush().await.unwrap();
        let path = dir.path().join("d/disk.img");
        let before = std::fs::metadata(&path).unwrap().blocks();
        drive.deallocate(0, 4 * MIB).await.unwrap();
        let after = std::fs::metadata(&path).unwrap().blocks();
        assert!(
            after * 512 < MIB && before * 512 >= 4 * MIB,
            "{before} -> {after} sectors"
        );
    }

    #[tokio::test]
    async fn second_open_of_same_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let _first = open(&dir, MIB, IoMode::Auto);
        let second = FileDrive::open(&dir.path().join("d/disk.img"), MIB, 4096);
        assert!(matches!(second, Err(DriveError::Open { .. })));
    }

    /// Whether a thread of this process has exactly this (15-byte-max) name.
    fn thread_exists(name: &str) -> bool {
        let tasks = std::fs::read_dir("/proc/self/task").unwrap();
        tasks.flatten().any(|t| {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            comm.trim_end() == name
        })
    }

    #[tokio::test]
    async fn abandoned_requests_are_safe_and_the_ring_thread_exits() {
        use futures_util::FutureExt;
        let dir = tempfile::tempdir().unwrap();
        let drive = FileDrive::open(&dir.path().join("abandon-probe"), 16 * MIB, 4096).unwrap();
        if !drive.uses_io_uring() {
            return; // Nothing to check without io_uring (see conformance_both_engines).
        }
        let data = testkit::pattern(4, MIB as usize);
        for i in 0..64 {
            // Polled once (submitted), then dropped while the kernel may still be working.
            let _ = drive.read(i % 16 * MIB, MIB as usize).now_or_never();
            let _ = drive
                .write(i % 16 * MIB, data.clone(), false)
                .now_or_never();
        }
        drive.write(0, data.clone(), false).await.unwrap();
        assert_eq!(drive.read(0, data.len()).await.unwrap(), data);
        assert!(thread_exists("uring-abandon-p"), "named after the file");
        drop(drive);
        for _ in 0..200 {
            if !thread_exists("uring-abandon-p") {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the io_uring thread outlived its drive");
    }

    #[test]
    fn bad_geometry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g");
        for (cap, bs) in [(0, 512), (1000, 512), (MIB, 100), (MIB, 8192)] {
            let res = FileDrive::open(&path, cap, bs);
            assert!(matches!(res, Err(DriveError::Unusable(_))), "{cap}/{bs}");
        }
    }
}
