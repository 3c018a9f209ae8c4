//! A drive that stores nothing: reads return zeros, writes are discarded. For benchmarking
//! the transport without any storage cost.

use bytes::Bytes;

use super::{
    check_geometry, check_range, zeroed_bytes, BackendKind, BoxFuture, Drive, DriveError,
    DriveInfo, ReadBuf,
};

pub struct NullDrive {
    info: DriveInfo,
}

impl NullDrive {
    pub fn new(capacity: u64, block_size: u32) -> Result<NullDrive, DriveError> {
        check_geometry(capacity, block_size)?;
        let info = DriveInfo {
            kind: BackendKind::Null,
            capacity,
            block_size,
            volatile_write_cache: false,
            path: None,
        };
        Ok(NullDrive { info })
    }

    fn ready<T: Send + 'static>(
        &self,
        offset: u64,
        len: u64,
        ok: T,
    ) -> BoxFuture<'_, Result<T, DriveError>> {
        Box::pin(std::future::ready(
            check_range(&self.info, offset, len).map(|()| ok),
        ))
    }
}

impl Drive for NullDrive {
    fn info(&self) -> &DriveInfo {
        &self.info
    }

    fn read(&self, offset: u64, len: usize) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(std::future::ready(self.read_now(offset, len)))
    }

    fn read_into(&self, offset: u64, buf: ReadBuf) -> BoxFuture<'_, Result<Bytes, DriveError>> {
        Box::pin(std::future::ready(self.read_into_now(offset, buf)))
    }

    fn write(&self, offset: u64, data: Bytes, _fua: bool) -> BoxFuture<'_, Result<(), DriveError>> {
        self.ready(offset, data.len() as u64, ())
    }

    fn completes_at_once(&self) -> bool {
        true
    }

    /// Zeros; up to 1 MiB they share one static buffer, so a read allocates nothing.
    fn read_now(&self, offset: u64, len: usize) -> Result<Bytes, DriveError> {
        check_range(&self.info, offset, len as u64).map(|()| zeroed_bytes(len))
    }

    /// Zeros written into the caller's buffer (its memory held whatever it last carried).
    fn read_into_now(&self, offset: u64, mut buf: ReadBuf) -> Result<Bytes, DriveError> {
        check_range(&self.info, offset, buf.len() as u64).map(|()| {
            buf.as_mut_slice().fill(0);
            buf.filled()
        })
    }

    fn write_now(&self, offset: u64, data: &[u8], _fua: bool) -> Result<(), DriveError> {
        check_range(&self.info, offset, data.len() as u64)
    }

    fn flush(&self) -> BoxFuture<'_, Result<(), DriveError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        self.ready(offset, len, ())
    }

    fn deallocate(&self, offset: u64, len: u64) -> BoxFuture<'_, Result<(), DriveError>> {
        self.ready(offset, len, ())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit;
    use super::*;

    const MIB: u64 = 1 << 20;

    #[tokio::test]
    async fn reads_zeros_into_lent_memory_whatever_it_held() {
        use super::super::read_buf::test_lender::VecLender;
        let drive = NullDrive::new(64 << 30, 4096).unwrap();
        let lender = VecLender::new();
        let got = drive
            .read_into(8192, lender.buf(16384, 0xee))
            .await
            .unwrap();
        assert_eq!(got.len(), 16384);
        assert!(got.iter().all(|&b| b == 0));
        drop(got);
        assert_eq!(lender.out.load(std::sync::atomic::Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn reads_zeros_and_discards_writes() {
        let drive = NullDrive::new(64 << 30, 4096).unwrap();
        drive
            .write(0, testkit::pattern(1, 8192), true)
            .await
            .unwrap();
        let small = drive.read(0, 8192).await.unwrap();
        assert_eq!(small.len(), 8192);
        assert!(testkit::is_zero(&small));
        let big = drive.read(MIB, 3 * MIB as usize).await.unwrap();
        assert_eq!(big.len(), 3 * MIB as usize);
        assert!(testkit::is_zero(&big));
        drive.flush().await.unwrap();
        drive.write_zeroes(0, MIB).await.unwrap();
        drive.deallocate(MIB, 64 * MIB).await.unwrap();
    }

    #[tokio::test]
    async fn small_reads_share_the_static_buffer() {
        let drive = NullDrive::new(16 * MIB, 512).unwrap();
        let a = drive.read(0, 4096).await.unwrap();
        let b = drive.read(MIB, MIB as usize).await.unwrap();
        assert_eq!(a.as_ptr(), b.as_ptr());
    }

    #[tokio::test]
    async fn range_errors() {
        for bs in [512, 4096] {
            testkit::range_errors(&NullDrive::new(16 * MIB, bs).unwrap()).await;
        }
    }

    #[test]
    fn bad_geometry_is_refused() {
        for (cap, bs) in [(0, 512), (1000, 512), (MIB, 100), (MIB, 8192)] {
            assert!(matches!(
                NullDrive::new(cap, bs),
                Err(DriveError::Unusable(_))
            ));
        }
    }
}
