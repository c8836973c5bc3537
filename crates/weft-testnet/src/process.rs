//! The long-running processes of a network: spawning one node (its stdout and
//! stderr go to `<dir>/stdout.log`), and stopping the ones this crate started
//! by their own PIDs — SIGTERM, then SIGKILL after a bound. Nothing here ever
//! signals a process it did not spawn.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// One child process owned by a test network.
#[derive(Debug)]
pub(crate) struct ManagedChild {
    name: String,
    child: Child,
    /// Set once the child has been reaped.
    status: Option<ExitStatus>,
}

impl ManagedChild {
    /// Spawn `cmd` for node `name`, stdout+stderr appended to `stdout_log`.
    /// With `die_with_parent`, the child gets SIGTERM if the spawning thread
    /// dies first (Linux `PR_SET_PDEATHSIG`) — for programs without tor's
    /// `__OwningControllerProcess`.
    pub(crate) fn spawn(
        name: &str,
        cmd: &mut Command,
        stdout_log: &Path,
        die_with_parent: bool,
    ) -> Result<Self> {
        let out = File::options()
            .create(true)
            .append(true)
            .open(stdout_log)
            .with_context(|| format!("opening {}", stdout_log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        if die_with_parent {
            use std::os::unix::process::CommandExt;
            // SAFETY: the closure runs between fork and exec and only calls
            // prctl(2), which is async-signal-safe; it touches no Rust state.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(
                        libc::PR_SET_PDEATHSIG,
                        libc::SIGTERM as libc::c_ulong,
                        0,
                        0,
                        0,
                    ) != 0
                    {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {name} ({:?})", cmd.get_program()))?;
        Ok(ManagedChild {
            name: name.to_string(),
            child,
            status: None,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status if the process has exited (reaping it).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.status = Some(st);
            }
        }
        self.status
    }

    /// Send SIGTERM if the process is still running (and not yet reaped, so
    /// its PID cannot have been reused).
    pub(crate) fn terminate(&mut self) {
        if self.exited().is_none() {
            if let Ok(pid) = libc::pid_t::try_from(self.child.id()) {
                // SAFETY: kill(2) with the PID of our own unreaped child.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
            }
        }
    }

    /// SIGKILL if still running, then reap.
    pub(crate) fn kill_and_reap(&mut self) -> Option<ExitStatus> {
        if self.exited().is_none() {
            let _ = self.child.kill();
            if let Ok(st) = self.child.wait() {
                self.status = Some(st);
            }
        }
        self.status
    }
}

/// Stop `children`: SIGTERM to all, wait up to `grace` for them to exit, then
/// SIGKILL the rest. Returns the names of those that needed SIGKILL.
pub(crate) fn stop_all(children: &mut [ManagedChild], grace: Duration) -> Vec<String> {
    for c in children.iter_mut() {
        c.terminate();
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline && children.iter_mut().any(|c| c.exited().is_none()) {
        std::thread::sleep(Duration::from_millis(25));
    }
    let mut killed = Vec::new();
    for c in children.iter_mut() {
        if c.exited().is_none() {
            killed.push(c.name().to_string());
            c.kill_and_reap();
        }
    }
    killed
}
