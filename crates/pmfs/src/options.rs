//! Mount-time options: how file data is written, where timestamps come from, leaf size of
//! new files. Nothing here is recorded on the media (the on-media parameters are
//! `layout::MkfsOptions`).

use crate::Mutant;

/// How file data is written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DataMode {
    /// Overwrites go in place with non-temporal stores (not atomic per write; metadata is).
    #[default]
    InPlace,
    /// Every touched leaf is rewritten into a new block and swapped in by the transaction:
    /// each write of at most 4 MiB is atomic.
    CopyOnWrite,
}

/// Where timestamps come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Clock {
    /// The system clock.
    System,
    /// A fixed value (deterministic tests).
    Fixed(u64),
    /// A deterministic clock that advances by one microsecond at every reading, starting at
    /// the given value (crash tests: every operation gets a new time, so a torn pair of
    /// times is visible, and a rerun of the same operations reads the same times).
    Stepping(u64),
}

impl Clock {
    /// Now, in ns since the Unix epoch; `readings` is the mount's count of earlier
    /// readings (used by [`Clock::Stepping`]).
    pub fn at(self, readings: u64) -> u64 {
        match self {
            Clock::Fixed(t) => t,
            Clock::Stepping(start) => start + readings * 1_000,
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
        }
    }

    /// Now, for clocks that need no state (a stepping clock reads its start).
    pub fn now(self) -> u64 {
        self.at(0)
    }
}

/// Mount-time options (nothing here is recorded on the media).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MountOptions {
    /// Data write mode.
    pub data_mode: DataMode,
    /// Timestamp source.
    pub clock: Clock,
    /// New regular files get 2 MiB leaves.
    pub huge_files: bool,
    /// Test-only deliberate bugs.
    #[doc(hidden)]
    pub mutant: Mutant,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            data_mode: DataMode::InPlace,
            clock: Clock::System,
            huge_files: false,
            mutant: Mutant::None,
        }
    }
}
