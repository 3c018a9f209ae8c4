//! A drive that does not forget a lost write.
//!
//! Linux reports a writeback error once: the fdatasync that meets it fails, and the next one
//! succeeds although the data never reached the media ("fsyncgate"). One descriptor serves every
//! controller, so a second Flush, another host's Flush, a broadcast Flush all answered SUCCESS
//! for data the media had lost. The guard remembers: once a Flush or a FUA write (or any write
//! with a media error) fails, the drive is read-only. It still reads, but every write, Flush,
//! Write Zeroes and deallocate fails, for every controller, until an operator has looked at the
//! drive and clears the fault (REST `POST /drives/{id}/clear-fault`). The fault is kept in the
//! state file, so a restart does not clear it either.
//!
//! ENOSPC on a write is not a loss: nothing was acknowledged, the command fails with Capacity
//! Exceeded and the drive stays writable. ENOSPC met by a Flush is (delayed allocation lost
//! acknowledged data).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;

use super::{BoxFuture, Drive, DriveError, DriveInfo, ReadBuf};

/// Why a drive refuses writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Seconds since the Unix epoch.
    pub since: u64,
    /// What failed, as the log said it.
    pub cause: String,
}

impl Fault {
    pub fn now(cause: String) -> Fault {
        let since = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Fault { since, cause }
    }
}

/// A failure the tests make happen on purpose, once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inject {
    /// The next Flush (or the sync of a FUA write) fails with EIO, as an fdatasync meeting a
    /// writeback error does.
    SyncError,
    /// The next write fails with ENOSPC before writing anything.
    NoSpace,
    /// The next write reaches the drive only after this long (a slow device).
    SlowWrite(std::time::Duration),
    /// The next read fails with EIO (a media error).
    ReadError,
    /// The next write fails with EIO before writing anything (a media error: the drive is
    /// failed from then on, as for any lost write).
    WriteError,
}

/// Told of every new fault (fabrikd persists it and says so in its log).
pub type OnFault = Box<dyn Fn(&Fault) + Send + Sync>;

pub struct Guarded {
    inner: Arc<dyn Drive>,
    fault: Mutex<Option<Fault>>,
    inject: Mutex<Option<Inject>>,
    /// `fault` and `inject` are set: every write asks both, and the answer is almost always
    /// no, so it is read here without taking their locks.
    faulted: AtomicBool,
    armed: AtomicBool,
    on_fault: OnFault,
}

impl Guarded {
    /// `fault`: one recorded before (from the state file).
    pub fn new(inner: Arc<dyn Drive>, fault: Option<Fault>, on_fault: OnFault) -> Guarded {
        Guarded {
            inner,
            faulted: AtomicBool::new(fault.is_some()),
            fault: Mutex::new(fault),
            inject: Mutex::new(None),
            armed: AtomicBool::new(false),
            on_fault,
        }
    }

    /// Makes the next matching operation fail once (tests).
    pub fn inject(&self, what: Inject) {
        *self.inject.lock().unwrap() = Some(what);
        self.armed.store(true, Ordering::Release);
    }

    fn injected(&self, what: Inject) -> bool {
        if !self.armed.load(Ordering::Acquire) {
            return false;
        }
        let mut i = self.inject.lock().unwrap();
        if *i == Some(what) {
            *i = None;
            self.armed.store(false, Ordering::Release);
            return true;
        }
        false
    }

    fn injected_delay(&self) -> Option<std::time::Duration> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let mut i = self.inject.lock().unwrap();
        match *i {
            Some(Inject::SlowWrite(d)) => {
                *i = None;
                self.armed.store(false, Ordering::Release);
                Some(d)
            }
            _ => None,
        }
    }

    /// What a write meets before the drive: a fault, an injected full disk or failed sync.
    fn before_write(&self, offset: u64, len: usize, fua: bool) -> Result<(), DriveError> {
        self.writable()?;
        if self.injected(Inject::NoSpace) {
            return Err(DriveError::Io {
                offset,
                len: len as u64,
                source: std::io::Error::from(std::io::ErrorKind::StorageFull),
            });
        }
        if fua && self.injected(Inject::SyncError) {
            return Err(self.failed(self.sync_failed(), true));
        }
        if self.injected(Inject::WriteError) {
            let eio = std::io::Error::from_raw_os_error(libc::EIO);
            return Err(self.failed(DriveError::io(offset, len as u64, eio), fua));
        }
        Ok(())
    }

    /// An injected read error, once.
    fn before_read(&self, offset: u64, len: usize) -> Result<(), DriveError> {
        if self.injected(Inject::ReadError) {
            let eio = std::io::Error::from_raw_os_error(libc::EIO);
            return Err(DriveError::io(offset, len as u64, eio));
        }
        Ok(())
    }

    /// Refuses a change to a failed drive.
    fn writable(&self) -> Result<(), DriveError> {
        if !self.faulted.load(Ordering::Acquire) {
            return Ok(());
        }
        match &*self.fault.lock().unwrap() {
            Some(f) => Err(DriveError::Failed(f.clone())),
            None => Ok(()),
        }
    }

    /// A change failed: if data may have been lost, the drive fails from now on.
    fn failed(&self, e: DriveError, sync: bool) -> DriveError {
        let loss = match &e {
            DriveError::Io { source, .. } => sync || !is_no_space(source),
            _ => false,
        };
        // ENOSPC from a sync is acknowledged data lost (delayed allocation): a Write Fault,
        // not this command's Capacity Exceeded.
        let e = match e {
            DriveError::Io {
                offset,
                len,
                source,
            } if sync && is_no_space(&source) => DriveError::Io {
                offset,
                len,
                source: std::io::Error::other(format!(
                    "writeback of earlier writes failed: {source}"
                )),
            },
            e => e,
        };
        if loss {
            let mut fault = self.fault.lock().unwrap();
            if fault.is_none() {
                let f = Fault::now(e.to_string());
                tracing::error!(
                    path = ?self.inner.info().path,
                    "a write may have been lost ({}): the drive is read-only until an operator clears the fault",
                    f.cause
                );
                (self.on_fault)(&f);
                *fault = Some(f);
                self.faulted.store(true, Ordering::Release);
            }
        }
        e
    }

    fn sync_failed(&self) -> DriveError {
        DriveError::Io {
            offset: 0,
            len: 0,
            source: std::io::Error::other("injected: fdatasync reported a writeback error"),
        }
    }
}

/// ENOSPC or EDQUOT: nothing was written.
pub fn is_no_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

impl Drive for Guarded {
    fn info(&self) -> &DriveInfo {
        self.inner.info()
    }

    fn smart_log(&self) -> Option<std::io::Result<fabrik_proto::nvme::log::SmartLog>> {
        self.inner.smart_log()
    }

    fn fault(&self) -> Option<Fault> {
        self.fault.lock().unwrap().clone()
    }

    fn clear_fault(&self) -> Option<Fault> {
        let was = {
            let mut fault = self.fault.lock().unwrap();
            self.faulted.store(false, Ordering::Release);
            fault.take()
        };
        if let Some(f) = &was {
            tracing::warn!(path = ?self.inner.info().path, cause = %f.cause, "drive fault cleared by the operator: writable again");
        }
        was
    }

    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        if let Err(e) = self.before_read(offset, len) {
            return Box::pin(async move { Err(e) });
        }
        self.inner.read(offset, len)
    }

    fn read_into(&self, offset: u64, buf: ReadBuf) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        if let Err(e) = self.before_read(offset, buf.len()) {
            return Box::pin(async move { Err(e) });
        }
        self.inner.read_into(offset, buf)
    }

    fn write(&self, offset: u64, data: Bytes, fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.before_write(offset, data.len(), fua)?;
            if let Some(d) = self.injected_delay() {
                crate::timer::sleep(d).await;
            }
            self.inner
                .write(offset, data, fua)
                .await
                .map_err(|e| self.failed(e, fua))
        })
    }

    /// At once where the drive is, unless a fault is to be injected (a slow write waits).
    fn completes_at_once(&self) -> bool {
        self.inner.completes_at_once() && !self.armed.load(Ordering::Acquire)
    }

    fn read_now(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        self.inner.read_now(offset, len)
    }

    fn read_into_now(&self, offset: u64, buf: ReadBuf) -> Result<Bytes, DriveError> {
        self.inner.read_into_now(offset, buf)
    }

    fn write_now(&self, offset: u64, data: &[u8], fua: bool) -> Result<(), DriveError> {
        self.before_write(offset, data.len(), fua)?;
        self.inner
            .write_now(offset, data, fua)
            .map_err(|e| self.failed(e, fua))
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.writable()?;
            if self.injected(Inject::SyncError) {
                return Err(self.failed(self.sync_failed(), true));
            }
            self.inner.flush().await.map_err(|e| self.failed(e, true))
        })
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.writable()?;
            self.inner
                .write_zeroes(offset, len)
                .await
                .map_err(|e| self.failed(e, false))
        })
    }

    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(async move {
            self.writable()?;
            self.inner
                .deallocate(offset, len)
                .await
                .map_err(|e| self.failed(e, false))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ram::RamDrive;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn guarded() -> (Guarded, Arc<AtomicUsize>) {
        let told = Arc::new(AtomicUsize::new(0));
        let t = told.clone();
        let g = Guarded::new(
            Arc::new(RamDrive::new(1 << 20, 4096).unwrap()),
            None,
            Box::new(move |_| {
                t.fetch_add(1, Ordering::Relaxed);
            }),
        );
        (g, told)
    }

    #[tokio::test]
    async fn a_lost_write_fails_every_later_flush_and_write_until_cleared() {
        let (g, told) = guarded();
        let data = Bytes::from(vec![7u8; 4096]);
        g.write(0, data.clone(), false).await.unwrap();
        g.inject(Inject::SyncError);
        assert!(matches!(g.flush().await, Err(DriveError::Io { .. })));
        // fsyncgate: the next fdatasync would succeed. The guard does not forget.
        for _ in 0..3 {
            assert!(matches!(g.flush().await, Err(DriveError::Failed(_))));
        }
        assert!(matches!(
            g.write(0, data.clone(), true).await,
            Err(DriveError::Failed(_))
        ));
        assert!(matches!(
            g.write(0, data.clone(), false).await,
            Err(DriveError::Failed(_))
        ));
        assert!(matches!(
            g.write_zeroes(0, 4096).await,
            Err(DriveError::Failed(_))
        ));
        assert!(matches!(
            g.deallocate(0, 4096).await,
            Err(DriveError::Failed(_))
        ));
        assert_eq!(g.read(0, 4096).await.unwrap(), data, "reads go on");
        assert_eq!(told.load(Ordering::Relaxed), 1, "told once");
        assert!(g.fault().is_some());
        assert!(g.clear_fault().is_some());
        g.flush().await.unwrap();
        g.write(0, data, true).await.unwrap();
    }

    #[tokio::test]
    async fn writes_at_once_meet_the_same_guard() {
        let (g, told) = guarded();
        let data = vec![3u8; 4096];
        assert!(g.completes_at_once(), "a RAM drive, nothing injected");
        g.write_now(0, &data, false).unwrap();
        assert_eq!(g.read_now(0, 4096).unwrap(), data);
        // Anything injected goes through the awaited path (a slow write waits there).
        g.inject(Inject::SlowWrite(std::time::Duration::from_millis(1)));
        assert!(!g.completes_at_once());
        g.write(0, Bytes::from(data.clone()), false).await.unwrap();
        assert!(g.completes_at_once(), "the injection was used");
        // Injected between the caller's look and the write: applied at once all the same.
        g.inject(Inject::NoSpace);
        assert!(matches!(
            g.write_now(0, &data, false),
            Err(DriveError::Io { ref source, .. }) if is_no_space(source)
        ));
        assert_eq!(g.fault(), None, "a full disk is no loss");
        g.inject(Inject::SyncError);
        assert!(matches!(
            g.write_now(0, &data, true),
            Err(DriveError::Io { .. })
        ));
        assert_eq!(told.load(Ordering::Relaxed), 1);
        assert!(matches!(
            g.write_now(0, &data, false),
            Err(DriveError::Failed(_))
        ));
        assert_eq!(g.read_now(0, 4096).unwrap(), data, "reads go on");
    }

    #[tokio::test]
    async fn a_failed_fua_write_fails_the_drive() {
        let (g, _) = guarded();
        g.inject(Inject::SyncError);
        let data = Bytes::from(vec![1u8; 4096]);
        assert!(matches!(
            g.write(0, data, true).await,
            Err(DriveError::Io { .. })
        ));
        assert!(matches!(g.flush().await, Err(DriveError::Failed(_))));
    }

    #[tokio::test]
    async fn no_space_met_by_a_sync_is_a_loss_not_a_full_disk() {
        struct FullOnSync(RamDrive);
        impl Drive for FullOnSync {
            fn info(&self) -> &DriveInfo {
                self.0.info()
            }
            fn read(&self, o: u64, l: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
                self.0.read(o, l)
            }
            fn write(&self, o: u64, d: Bytes, f: bool) -> BoxFuture<'_, Result<(), DriveError>> {
                self.0.write(o, d, f)
            }
            fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
                Box::pin(async {
                    Err(DriveError::Io {
                        offset: 0,
                        len: 0,
                        source: std::io::Error::from(std::io::ErrorKind::StorageFull),
                    })
                })
            }
            fn write_zeroes(&self, o: u64, l: u64) -> BoxFuture<'_, Result<(), DriveError>> {
                self.0.write_zeroes(o, l)
            }
            fn deallocate(&self, o: u64, l: u64) -> BoxFuture<'_, Result<(), DriveError>> {
                self.0.deallocate(o, l)
            }
        }
        let g = Guarded::new(
            Arc::new(FullOnSync(RamDrive::new(1 << 20, 4096).unwrap())),
            None,
            Box::new(|_| {}),
        );
        match g.flush().await {
            Err(DriveError::Io { source, .. }) => assert!(!is_no_space(&source), "{source}"),
            other => panic!("{other:?}"),
        }
        assert!(g.fault().is_some());
    }

    #[tokio::test]
    async fn no_space_on_a_write_is_no_loss() {
        let (g, told) = guarded();
        g.inject(Inject::NoSpace);
        let data = Bytes::from(vec![1u8; 4096]);
        match g.write(0, data.clone(), false).await {
            Err(DriveError::Io { source, .. }) => assert!(is_no_space(&source)),
            other => panic!("{other:?}"),
        }
        g.write(0, data, false).await.unwrap();
        g.flush().await.unwrap();
        assert_eq!(told.load(Ordering::Relaxed), 0);
        assert!(g.fault().is_none());
    }
}
