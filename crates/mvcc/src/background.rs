//! The background reclaimer thread: it serves the lanes' requests ([`crate::handoff`]) with
//! the same trims, checkpoints and write-backs a lane would run itself, and ends the grace
//! periods of what they unlinked, so a committing thread only appends.

use crate::engine::Core;
use crate::handoff::{Wake, Work};
use pmem::Persist;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the reclaimer looks again for grace periods that ended while versions or
/// headers wait for one (a lane's next transaction usually ends them within microseconds).
const GRACE_POLL: Duration = Duration::from_micros(50);

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
        loop {
            let poll = (!self.retired.lock().is_empty()).then_some(GRACE_POLL);
            match self.requests.next(poll) {
                Wake::Stop => return,
                Wake::Idle => {}
                Wake::Work(Work::Trim) => {
                    self.trim();
                    self.count_done();
                }
                Wake::Work(Work::Checkpoint) => {
                    if self.checkpoint_and_release().is_err() {
                        self.requests.withdraw();
                        return;
                    }
                    self.count_done();
                }
            }
            self.free_expired();
        }
    }

    /// Counts a served request once it is done (Release: whoever reads the count with
    /// `stats()` also sees the trim's or checkpoint's own counters).
    fn count_done(&self) {
        self.stats
            .background_reclaims
            .fetch_add(1, Ordering::Release);
    }
}
