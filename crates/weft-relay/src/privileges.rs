//! `User`: run as another user after the listeners are bound, as C Tor
//! does. The user is looked up in /etc/passwd when the configuration is
//! read (an unknown user is a configuration error, as in C); at start the
//! DataDirectory is handed to that user, and once every listener is bound
//! the process takes the user's group, supplementary groups and uid, and
//! checks that root cannot be regained.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The user to run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    /// User name.
    pub name: String,
    /// Its uid.
    pub uid: u32,
    /// Its primary gid.
    pub gid: u32,
}

/// Look a user up in `passwd` (the text of /etc/passwd).
pub fn lookup_in(passwd: &str, name: &str) -> Option<RunAs> {
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 4 && f[0] == name).then(|| {
            Some(RunAs {
                name: name.to_string(),
                uid: f[2].parse().ok()?,
                gid: f[3].parse().ok()?,
            })
        })?
    })
}

/// Look a user up in /etc/passwd.
pub fn lookup(name: &str) -> Result<RunAs, String> {
    let passwd = std::fs::read_to_string("/etc/passwd")
        .map_err(|e| format!("cannot read /etc/passwd: {e}"))?;
    lookup_in(&passwd, name).ok_or_else(|| format!("User '{name}' not found"))
}

/// The effective uid of this process (the owner of /proc/self).
pub fn effective_uid() -> io::Result<u32> {
    Ok(std::fs::metadata("/proc/self")?.uid())
}

/// Whether `data_dir` may be handed to `who`: it does not exist yet, or
/// `who` owns it already (as C Tor requires; weft never takes over a
/// directory someone else owns).
pub fn check_data_dir(who: &RunAs, data_dir: &Path) -> Result<(), String> {
    match std::fs::symlink_metadata(data_dir) {
        Err(_) => Ok(()),
        Ok(m) if m.uid() == who.uid && m.is_dir() => Ok(()),
        Ok(m) => Err(format!(
            "DataDirectory {} is owned by uid {}, not by User {} (uid {}): give it to {} or remove it",
            data_dir.display(),
            m.uid(),
            who.name,
            who.uid,
            who.name
        )),
    }
}

/// Before anything is written: create the DataDirectory (0700) for
/// `who` if it is missing, or check that `who` owns it.
pub fn prepare_data_dir(who: &RunAs, data_dir: &Path) -> anyhow::Result<()> {
    check_data_dir(who, data_dir).map_err(anyhow::Error::msg)?;
    if !data_dir.exists() {
        std::fs::create_dir_all(data_dir)?;
        std::fs::set_permissions(
            data_dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o700),
        )?;
        std::os::unix::fs::lchown(data_dir, Some(who.uid), Some(who.gid))?;
    }
    Ok(())
}

/// Give `dir` and everything under it (not following links) to `who`.
pub fn chown_tree(dir: &Path, who: &RunAs) -> io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(who.uid), Some(who.gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for e in std::fs::read_dir(dir)? {
            chown_tree(&e?.path(), who)?;
        }
    }
    Ok(())
}

/// Become `who`: supplementary groups (just its primary group), gid, uid.
/// Fails unless afterwards the process is `who` and cannot become root.
pub fn become_user(who: &RunAs) -> io::Result<()> {
    let gid = who.gid as libc::gid_t;
    // SAFETY: setgroups reads one gid_t from a live local; setgid and
    // setuid take plain integers. glibc applies all three to every thread
    // of the process. Each result is checked.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setgid(gid) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setuid(who.uid as libc::uid_t) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if effective_uid()? != who.uid {
        return Err(io::Error::other("uid did not change"));
    }
    if who.uid != 0 {
        // SAFETY: a plain integer argument; the call must fail now.
        if unsafe { libc::setuid(0) } == 0 {
            return Err(io::Error::other("root could be regained after dropping it"));
        }
    }
    Ok(())
}

/// `User`: every listener is bound; hand the DataDirectory to the user
/// and become it.
pub fn run_as(u: &RunAs, data_dir: &Path) -> anyhow::Result<()> {
    let euid = effective_uid()?;
    if euid == u.uid {
        return Ok(());
    }
    if euid != 0 {
        anyhow::bail!(
            "User {} needs weft to start as root (it runs as uid {euid})",
            u.name
        );
    }
    // The directory is the user's (prepare_data_dir); what weft wrote in
    // it as root (keys, cookies) becomes the user's too.
    check_data_dir(u, data_dir).map_err(anyhow::Error::msg)?;
    chown_tree(data_dir, u)
        .map_err(|e| anyhow::anyhow!("cannot give {} to {}: {e}", data_dir.display(), u.name))?;
    become_user(u).map_err(|e| anyhow::anyhow!("cannot become {}: {e}", u.name))?;
    tracing::info!("running as {} (uid {}, gid {})", u.name, u.uid, u.gid);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwd_lookup() {
        let p = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nbad:x:zz:1::/:/bin/false\n";
        assert_eq!(
            lookup_in(p, "nobody"),
            Some(RunAs {
                name: "nobody".into(),
                uid: 65534,
                gid: 65534
            })
        );
        assert_eq!(lookup_in(p, "nob"), None);
        assert_eq!(lookup_in(p, "bad"), None);
    }
}
