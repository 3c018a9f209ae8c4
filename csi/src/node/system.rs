//! What the node plugin reads and does on its host: the kernel's NVMe subsystems and block
//! devices in sysfs, the mount table, what a device holds, and the commands it runs (nvme-cli,
//! mkfs). Mounts are made with the mount syscalls directly: no mount(8) whose flavour
//! (util-linux, busybox) changes what a flag means.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The block device (`/dev/nvmeXnY`) of the namespace with this NGUID or UUID, looked for in
/// `sys_block` (`/sys/block`). Multipath path devices (`nvmeXcYnZ`) are passed over: the head
/// device is the one to use.
pub fn find_device(sys_block: &Path, nguid: &str, uuid: &str) -> Option<PathBuf> {
    let norm = |s: &str| -> String {
        s.trim()
            .chars()
            .filter(|c| *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted: Vec<String> = [nguid, uuid]
        .iter()
        .map(|s| norm(s))
        .filter(|s| !s.is_empty() && s.chars().any(|c| c != '0'))
        .collect();
    if wanted.is_empty() {
        return None;
    }
    let mut names: Vec<String> = std::fs::read_dir(sys_block)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| is_namespace_head(n))
        .collect();
    names.sort();
    names.into_iter().find_map(|name| {
        let dir = sys_block.join(&name);
        let ids = ["nguid", "uuid", "wwid"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(dir.join(f)).ok())
            .map(|s| norm(s.trim_start_matches("eui.").trim_start_matches("uuid.")))
            .collect::<Vec<_>>();
        ids.iter()
            .any(|id| wanted.contains(id))
            .then(|| PathBuf::from("/dev").join(&name))
    })
}

/// `nvme<N>n<M>`, not `nvme<N>c<C>n<M>` (a path under a multipath head) nor a partition.
fn is_namespace_head(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("nvme") else {
        return false;
    };
    let Some((ctrl, ns)) = rest.split_once('n') else {
        return false;
    };
    !ctrl.is_empty()
        && ctrl.bytes().all(|b| b.is_ascii_digit())
        && !ns.is_empty()
        && ns.bytes().all(|b| b.is_ascii_digit())
}

/// Whether a kernel NVMe subsystem with this NQN is there (the host is connected to it), from
/// `sys_class` (`/sys/class/nvme-subsystem`).
pub fn subsystem_connected(sys_class: &Path, nqn: &str) -> bool {
    let Ok(dir) = std::fs::read_dir(sys_class) else {
        return false;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("subsysnqn")).ok())
        .any(|s| s.trim() == nqn)
}

/// The mount points in a mountinfo text (`/proc/self/mountinfo`), unescaped.
pub fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(unescape(p)))
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` is a mount point now.
pub fn is_mount_point(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let points = mount_points(&info);
    let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    points.iter().any(|p| p == path || *p == canonical)
}

/// What a device holds at its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holds {
    /// Zeros: a new volume, to be formatted.
    Nothing,
    Filesystem(&'static str),
    /// Something else (a partition table, another filesystem): never formatted over.
    Unknown,
}

/// Reads the head of a device: ext2/3/4 (magic 0xEF53 at 1080) or XFS ("XFSB" at 0), all
/// zeros, or something else.
pub fn probe(head: &[u8]) -> Holds {
    if head.len() >= 4 && &head[..4] == b"XFSB" {
        return Holds::Filesystem("xfs");
    }
    if head.len() >= 1082 && head[1080..1082] == [0x53, 0xEF] {
        return Holds::Filesystem("ext4");
    }
    if head.iter().all(|b| *b == 0) {
        Holds::Nothing
    } else {
        Holds::Unknown
    }
}

/// The first 64 KiB of `dev` (less if it is smaller).
pub fn read_head(dev: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(dev)?
        .take(64 << 10)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// Runs `cmd args`, within `limit`: its standard output, or one line saying what failed.
pub async fn run(cmd: &str, args: &[&str], limit: Duration) -> Result<String, String> {
    let what = format!("{cmd} {}", args.join(" "));
    tracing::info!(command = %what, "running");
    let child = tokio::process::Command::new(cmd)
        .args(args)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(limit, child)
        .await
        .map_err(|_| format!("{what}: no answer within {} s", limit.as_secs()))?
        .map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    Err(format!("{what}: {} {}", out.status, line.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_found_by_nguid_or_uuid_not_by_their_paths() {
        let dir = tempfile::tempdir().unwrap();
        let add = |name: &str, file: &str, text: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(file), text).unwrap();
        };
        add("nvme0n1", "nguid", "11111111-2222-3333-4444-555555555555\n");
        add(
            "nvme1c1n1",
            "nguid",
            "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\n",
        );
        add("nvme1n1", "nguid", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee\n");
        add("nvme2n1", "uuid", "0b1c2d3e-0000-4000-8000-000000000001\n");
        add(
            "nvme2n1p1",
            "uuid",
            "0b1c2d3e-0000-4000-8000-000000000001\n",
        );
        add("sda", "wwid", "aaaaaaaabbbbccccddddeeeeeeeeeeee\n");
        let find = |nguid: &str, uuid: &str| find_device(dir.path(), nguid, uuid);
        assert_eq!(
            find("AAAAAAAABBBBCCCCDDDDEEEEEEEEEEEE", ""),
            Some(PathBuf::from("/dev/nvme1n1"))
        );
        assert_eq!(
            find("", "0b1c2d3e-0000-4000-8000-000000000001"),
            Some(PathBuf::from("/dev/nvme2n1"))
        );
        assert_eq!(find("00000000000000000000000000000000", ""), None);
        assert_eq!(find("99999999999999999999999999999999", ""), None);
    }

    #[test]
    fn subsystems_are_known_by_nqn() {
        let dir = tempfile::tempdir().unwrap();
        let s = dir.path().join("nvme-subsys3");
        std::fs::create_dir_all(&s).unwrap();
        std::fs::write(s.join("subsysnqn"), "nqn.2024-01.io.fabrik:a:vol-x\n").unwrap();
        assert!(subsystem_connected(
            dir.path(),
            "nqn.2024-01.io.fabrik:a:vol-x"
        ));
        assert!(!subsystem_connected(
            dir.path(),
            "nqn.2024-01.io.fabrik:a:vol-y"
        ));
        assert!(!subsystem_connected(&dir.path().join("none"), "x"));
    }

    #[test]
    fn mountinfo_points_are_unescaped() {
        let info = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n\
                    35 22 259:0 / /var/lib/kubelet/pods/a\\040b/mount rw - ext4 /dev/nvme1n1 rw\n";
        assert_eq!(
            mount_points(info),
            [
                PathBuf::from("/"),
                PathBuf::from("/var/lib/kubelet/pods/a b/mount")
            ]
        );
    }

    #[test]
    fn heads_are_told_apart() {
        let mut head = vec![0u8; 4096];
        assert_eq!(probe(&head), Holds::Nothing);
        head[1080] = 0x53;
        head[1081] = 0xEF;
        assert_eq!(probe(&head), Holds::Filesystem("ext4"));
        let mut xfs = vec![0u8; 4096];
        xfs[..4].copy_from_slice(b"XFSB");
        assert_eq!(probe(&xfs), Holds::Filesystem("xfs"));
        let mut gpt = vec![0u8; 4096];
        gpt[512..520].copy_from_slice(b"EFI PART");
        assert_eq!(probe(&gpt), Holds::Unknown);
    }
}
