//! Child processes that die with their parent.
//!
//! A process killed by `SIGKILL` runs no handler, so it cannot end the programs it started:
//! they run on, reparented to init. Linux's `PR_SET_PDEATHSIG` makes the kernel send a
//! signal to a process when its parent dies; [`die_with_parent`] sets it in the child between
//! `fork` and `exec` (a `pre_exec` hook), so it holds for the program the child becomes.
//!
//! The race: the parent may die after the `fork` and before the `prctl`, and then no signal
//! ever comes. The hook therefore checks afterwards that its parent is still the process
//! that spawned it (`getppid`); if not, the child fails to start instead of running on.
//!
//! "Parent" is the *thread* that spawned the child: the signal also comes when that thread
//! ends while the process lives. Spawn from a thread that outlives the child (every caller in
//! Ferrite waits for its child on the thread that spawned it).

use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

/// The signal a child gets when its parent dies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// `SIGKILL`: the child ends at once.
    Kill,
    /// `SIGTERM`: for a child that cleans up on it (a `ferrite` run tears down its scratch
    /// pools and mounts and exits).
    Terminate,
}

impl Signal {
    fn number(self) -> libc::c_int {
        match self {
            Signal::Kill => libc::SIGKILL,
            Signal::Terminate => libc::SIGTERM,
        }
    }
}

/// Makes the child that `command` spawns get `signal` when this process's spawning thread
/// dies, however it dies; a child whose parent is already gone when it starts fails to start.
pub fn die_with_parent(command: &mut Command, signal: Signal) -> &mut Command {
    guard(command, signal, std::process::id())
}

/// [`die_with_parent`] with the parent the child must still have after the `prctl`.
fn guard(command: &mut Command, signal: Signal, parent: u32) -> &mut Command {
    let number = signal.number();
    let hook = move || {
        // SAFETY: `prctl(PR_SET_PDEATHSIG, sig)` reads its integer arguments only and
        // changes this (child) process's own attribute; it is a plain system call,
        // async-signal-safe as the forked child of a threaded process requires.
        let set = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, number as libc::c_ulong, 0, 0, 0) };
        if set != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `getppid` takes no arguments and cannot fail; a plain system call.
        let now = unsafe { libc::getppid() };
        if u32::try_from(now).ok() != Some(parent) {
            // The parent died before the prctl took effect: no signal will come.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before `exec`, where only async-signal-safe
    // work is allowed: it makes two system calls and builds its error from a raw errno,
    // allocating nothing and taking no lock.
    unsafe { command.pre_exec(hook) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_whose_parent_is_not_the_spawner_does_not_start() {
        let mut command = Command::new("true");
        guard(&mut command, Signal::Kill, std::process::id() + 1);
        let refused = command.spawn().expect_err("the parent check refuses it");
        assert_eq!(refused.raw_os_error(), Some(libc::ESRCH), "{refused}");
    }

    #[test]
    fn a_guarded_child_runs_normally_while_its_parent_lives() {
        let status = die_with_parent(&mut Command::new("true"), Signal::Kill)
            .status()
            .expect("runs");
        assert!(status.success());
        let output = die_with_parent(&mut Command::new("sh"), Signal::Terminate)
            .args(["-c", "grep '^PPid' /proc/$$/status"])
            .output()
            .expect("runs");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            text.contains(&format!("PPid:\t{}", std::process::id())),
            "{text}"
        );
    }
}
