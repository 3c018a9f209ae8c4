//! SMART / health passthrough for block drives that are NVMe namespaces: Get Log Page (SMART)
//! sent to the namespace's controller through the kernel's admin passthrough ioctl, as
//! `nvme smart-log` does. Needs CAP_SYS_ADMIN; without it the caller falls back to what fabrikd
//! tracks itself.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use fabrik_proto::nvme::log::{lid, SmartLog, SMART_LOG_LEN};

/// `struct nvme_passthru_cmd` of `<linux/nvme_ioctl.h>` (72 bytes).
#[repr(C)]
#[derive(Default)]
struct PassthruCmd {
    opcode: u8,
    flags: u8,
    rsvd1: u16,
    nsid: u32,
    cdw2: u32,
    cdw3: u32,
    metadata: u64,
    addr: u64,
    metadata_len: u32,
    data_len: u32,
    cdw10: u32,
    cdw11: u32,
    cdw12: u32,
    cdw13: u32,
    cdw14: u32,
    cdw15: u32,
    timeout_ms: u32,
    result: u32,
}

/// `NVME_IOCTL_ADMIN_CMD`: `_IOWR('N', 0x41, struct nvme_admin_cmd)`.
const NVME_IOCTL_ADMIN_CMD: libc::c_ulong =
    (3 << 30) | ((std::mem::size_of::<PassthruCmd>() as libc::c_ulong) << 16) | (0x4E << 8) | 0x41;
const OPC_GET_LOG_PAGE: u8 = 0x02;

/// The controller character device (`/dev/nvme0`) behind an NVMe namespace block device
/// (`/dev/nvme0n1`, also a native-multipath head); None for any other device.
pub fn controller_of(block: &Path) -> Option<PathBuf> {
    let real = std::fs::canonicalize(block).ok()?;
    let name = real.file_name()?.to_str()?;
    if !name.starts_with("nvme") {
        return None;
    }
    // /sys/class/block/nvme0n1/device is the controller (nvme0) or, for a multipath head, the
    // subsystem (nvme-subsys0), whose entries include its controllers.
    let device = std::fs::canonicalize(format!("/sys/class/block/{name}/device")).ok()?;
    let dev_name = device.file_name()?.to_str()?.to_string();
    let is_ctrl = |n: &str| {
        n.strip_prefix("nvme")
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    let ctrl = if is_ctrl(&dev_name) {
        dev_name
    } else {
        let mut ctrls: Vec<String> = std::fs::read_dir(&device)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| is_ctrl(n))
            .collect();
        ctrls.sort();
        ctrls.into_iter().next()?
    };
    Some(PathBuf::from("/dev").join(ctrl))
}

/// Reads the controller-wide SMART / Health Information log.
pub fn read_smart_log(ctrl: &Path) -> io::Result<SmartLog> {
    let file = File::open(ctrl)?;
    let mut buf = [0u8; SMART_LOG_LEN];
    let numd = (SMART_LOG_LEN / 4 - 1) as u32;
    let mut cmd = PassthruCmd {
        opcode: OPC_GET_LOG_PAGE,
        nsid: 0xffff_ffff,
        addr: buf.as_mut_ptr() as u64,
        data_len: SMART_LOG_LEN as u32,
        cdw10: ((numd & 0xffff) << 16) | lid::SMART as u32,
        cdw11: numd >> 16,
        timeout_ms: 5000,
        ..PassthruCmd::default()
    };
    // SAFETY: `cmd` is a valid nvme_passthru_cmd whose addr/data_len describe `buf`, which
    // outlives the call; the kernel writes at most data_len bytes there.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ADMIN_CMD as _, &mut cmd) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc > 0 {
        return Err(io::Error::other(format!(
            "Get Log Page (SMART) failed with NVMe status {rc:#x}"
        )));
    }
    SmartLog::decode(&buf).map_err(|e| io::Error::other(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthru_layout_matches_the_kernel() {
        assert_eq!(std::mem::size_of::<PassthruCmd>(), 72);
        assert_eq!(NVME_IOCTL_ADMIN_CMD, 0xC048_4E41);
    }

    #[test]
    fn non_nvme_devices_have_no_controller() {
        assert_eq!(controller_of(Path::new("/dev/null")), None);
        assert_eq!(controller_of(Path::new("/nonexistent/nvme0n1")), None);
    }
}
