//! The background reclaimer thread: it serves the lanes' requests ([`crate::handoff`]) with
//! the same trims, checkpoints and write-backs a lane would run itself, and ends the grace
//! periods of what they unlinked, so a committing thread only appends.

use crate::engine::Core;
use crate::handoff::{Wake, Work};
use pmem::Persist;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the reclaimer looks again for grace periods that ended while versions or
/// headers wait for one (a lane's next transaction usually ends them within microseconds).
const GRACE_POLL: Duration = Duration::from_micros(50);

/// How long the reclaimer must go without a request before it looks at the interval since
/// its last look: a read-mostly one that left headers in the table ends in a settle
/// ([`Core::settle`]). Short enough that a bulk load's headers stop costing reads within
/// milliseconds; long enough that the look costs nothing measurable.
const SETTLE_AFTER: Duration = Duration::from_millis(10);

/// How often an idle reclaimer with no header in the table looks again (a write that makes
/// one asks for nothing until the version log fills).
const IDLE_POLL: Duration = Duration::from_secs(1);

/// Starts the reclaimer of `core`; `None` (the lanes reclaim by themselves) if the thread
/// cannot be started.
pub(crate) fn spawn_reclaimer<P: Persist>(core: Arc<Core<P>>) -> Option<JoinHandle<()>> {
    core.requests.start();
    let serving = Arc::clone(&core);
    match std::thread::Builder::new()
        .name("mvcc-reclaimer".into())
        .spawn(move || serving.serve_requests())
    {
        Ok(handle) => Some(handle),
        Err(_) => {
            core.requests.withdraw();
            None
        }
    }
}

impl<P: Persist> Core<P> {
    /// The reclaimer's loop, until the engine stops it. A failed checkpoint (the backend
    /// poisoned, the CLog too small) ends it: the lanes then reclaim by themselves and
    /// meet the same failure as a typed error of their next transaction.
    fn serve_requests(&self) {
        let mut quiet = Quiet::new(self.transactions_so_far());
        loop {
            let poll = if !self.retired.lock().is_empty() {
                GRACE_POLL
            } else if self.table.live() > 0 {
                quiet.next_look()
            } else {
                IDLE_POLL
            };
            match self.requests.next(Some(poll)) {
                Wake::Stop => return,
                Wake::Idle => {
                    if quiet.is_over() && self.settles_after(&mut quiet) && self.settle().is_err() {
                        self.requests.withdraw();
                        return;
                    }
                }
                Wake::Work(Work::Trim) => {
                    self.trim();
                    self.count_done();
                    quiet.busy();
                }
                Wake::Work(Work::Checkpoint) => {
                    if self.checkpoint_and_release().is_err() {
                        self.requests.withdraw();
                        return;
                    }
                    self.count_done();
                    quiet.busy();
                }
            }
            self.free_expired();
        }
    }

    /// Whether the interval `quiet` ends calls for a settle: it was read-mostly and left
    /// something to checkpoint or write back. Starts the next interval either way.
    fn settles_after(&self, quiet: &mut Quiet) -> bool {
        let now = self.transactions_so_far();
        let (reads, writes) = (now.0 - quiet.counted.0, now.1 - quiet.counted.1);
        quiet.counted = now;
        quiet.restart();
        if reads + writes == 0 {
            quiet.idle_looks = quiet.idle_looks.saturating_add(1);
        } else {
            quiet.idle_looks = 0;
        }
        self.is_read_mostly(reads, writes) && self.has_settling_work()
    }

    /// Counts a served request once it is done (Release: whoever reads the count with
    /// `stats()` also sees the trim's or checkpoint's own counters).
    fn count_done(&self) {
        self.stats
            .background_reclaims
            .fetch_add(1, Ordering::Release);
    }
}

/// The reclaimer's view of the interval since its last request or look.
struct Quiet {
    /// When the interval began.
    since: Instant,
    /// Read-only and writing transactions before it.
    counted: (u64, u64),
    /// Looks in a row that found no transaction at all: each doubles the wait for the
    /// next (up to [`IDLE_POLL`]), so an engine nobody uses does not wake 100 times a second.
    idle_looks: u32,
}

impl Quiet {
    fn new(counted: (u64, u64)) -> Self {
        Quiet {
            since: Instant::now(),
            counted,
            idle_looks: 0,
        }
    }

    /// How long to wait before the next look.
    fn next_look(&self) -> Duration {
        SETTLE_AFTER
            .saturating_mul(1 << self.idle_looks.min(7))
            .min(IDLE_POLL)
    }

    /// A request came: transactions are running, look again soon.
    fn busy(&mut self) {
        self.restart();
        self.idle_looks = 0;
    }

    /// Whether [`SETTLE_AFTER`] went by without a request.
    fn is_over(&self) -> bool {
        self.since.elapsed() >= SETTLE_AFTER
    }

    fn restart(&mut self) {
        self.since = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Looks that find no transaction back off from 10 ms to at most 1 s; a request brings
    /// the wait back to 10 ms.
    #[test]
    fn idle_looks_back_off_up_to_a_second() {
        let mut quiet = Quiet::new((0, 0));
        assert_eq!(quiet.next_look(), SETTLE_AFTER);
        quiet.idle_looks = 3;
        assert_eq!(quiet.next_look(), Duration::from_millis(80));
        quiet.idle_looks = u32::MAX;
        assert_eq!(quiet.next_look(), IDLE_POLL);
        quiet.busy();
        assert_eq!(quiet.next_look(), SETTLE_AFTER);
    }
}
