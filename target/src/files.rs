//! Files fabrikd creates: private to its user, and durable once created.
//!
//! Drive images hold tenants' data and the data directory holds the API token and the state
//! (every host's NQN): nothing of it is for other local users, whatever the umask.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// Mode of the directories fabrikd creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the files fabrikd creates.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents, each 0700; an existing directory keeps its mode
/// (an operator's choice).
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Opens `path` for reading and writing, creating it 0600 if missing; a file it created is
/// made durable in its directory (the directory is fsynced), so a crash cannot lose the name
/// of a file data was then written to. Returns the file and whether it was created.
pub fn open_or_create_private(
    path: &Path,
    extra: impl Fn(&mut OpenOptions),
) -> io::Result<(File, bool)> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).mode(FILE_MODE);
    extra(&mut opts);
    match opts.clone().create_new(true).open(path) {
        Ok(f) => {
            sync_parent(path)?;
            Ok((f, true))
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok((opts.open(path)?, false)),
        Err(e) => Err(e),
    }
}

/// Fsyncs the directory holding `path` (after a create or a rename there).
pub fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn what_fabrikd_creates_is_private_whatever_the_umask() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        assert_eq!(mode(&dir), 0o700);
        let file = dir.join("f");
        let (_, created) = open_or_create_private(&file, |_| {}).unwrap();
        assert!(created);
        assert_eq!(mode(&file), 0o600);
        let (_, created) = open_or_create_private(&file, |_| {}).unwrap();
        assert!(!created, "opened, not created, the second time");
        // An existing directory keeps the mode an operator gave it.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o750);
    }
}
