//! The commit token, merges and commit points (`docs/nvthreads.md` §3.5, §5).
//!
//! - Holding the commit token is required to merge, to append to the log, and to acquire
//!   a mutex. A thread takes it at the acquire that moves its lock depth 0 → 1 and keeps it
//!   until the release that moves it back to 0 ("durable code section"), so sections run one
//!   at a time and the token holder never waits for anything but the program's own code.
//! - A thread that must block while holding locks (a `cond_wait` at depth > 1, a mutex held
//!   by a thread that is itself blocked) merges its open section into the shared view
//!   without committing it, counts itself in `open_sections`, and gives up the token.
//! - A merge with nothing open is a global commit point: one epoch flip commits every record
//!   appended since the last one (including those of sections that ran while another was
//!   open and may have observed it — the conservative form of the paper's dependences).

use super::env::{Mutant, env};
use super::{LOCAL, Runtime, depth, fatal, get, set};
use crate::diff::Span;
use crate::heapmeta;
use crate::journal::Mutation;
use crate::pages::PAGE;
use crate::record::Run;
use crate::shared::{Clock, Counters, Shared};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The shared block, for the fence hook (set once it is mapped).
static SHARED: OnceLock<&'static Shared> = OnceLock::new();
/// Persistence steps taken before the shared block exists (recovery).
static EARLY_STEPS: AtomicU64 = AtomicU64::new(0);

/// The shared block of this run, once mapped.
pub(super) fn shared_block() -> Option<&'static Shared> {
    SHARED.get().copied()
}

/// Hands the step count of recovery over to the shared block: from now on every process of
/// the run counts its persistence steps there.
pub(super) fn attach_steps(shared: &'static Shared) {
    shared
        .steps
        .store(EARLY_STEPS.load(Ordering::Relaxed), Ordering::Relaxed);
    let _ = SHARED.set(shared);
}

/// A persistence step (every fence of the log protocol: recovery, append, commit,
/// checkpoint): counts it across all thread-processes and, at the `NVT_CRASH_AT`-th, kills
/// the process group — with `NVT_PFAIL`, after rolling back the pool's pending lines as a
/// power failure just before that fence would (`crate::pfail`).
pub(super) fn step() {
    let n = match SHARED.get() {
        Some(shared) => shared.steps.fetch_add(1, Ordering::Relaxed) + 1,
        None => EARLY_STEPS.fetch_add(1, Ordering::Relaxed) + 1,
    };
    if env().crash_at == Some(n) {
        crate::pfail::power_failure(n, env().stats);
        // SAFETY: kill(0, SIGKILL) signals our own process group.
        unsafe { libc::kill(0, libc::SIGKILL) };
    }
}

/// The journal's own bug selected by `NVT_MUTANT` (tests only).
pub(super) fn journal_mutation() -> Mutation {
    match env().mutant {
        Some(Mutant::NoLogFlush) => Mutation::NoLogFlush,
        _ => Mutation::None,
    }
}

/// How a merge's runs become records and when they commit: the correct protocol, or one of
/// the deliberate bugs the C-program tests must catch (`NVT_MUTANT`), chosen once at
/// start-up ([`protocol`]), so the merge itself has no test-only branch.
trait Protocol: Sync {
    /// The records one merge's runs are appended as (correct: one, so a section's pages are
    /// all or nothing).
    fn records<'r, 'a>(&self, runs: &'r [Run<'a>]) -> Vec<&'r [Run<'a>]>;
    /// Whether each record is committed as soon as it is appended (correct: no, records wait
    /// for the merge's commit point).
    fn commits_each_record(&self) -> bool;
    /// Whether a commit point may flip the epoch while `open` sections are open (correct:
    /// only when none is, so a section that may have observed an open one commits with it).
    fn may_commit(&self, open: u32) -> bool;
}

/// The protocol of `docs/nvthreads.md` §5.
struct Correct;

impl Protocol for Correct {
    fn records<'r, 'a>(&self, runs: &'r [Run<'a>]) -> Vec<&'r [Run<'a>]> {
        vec![runs]
    }

    fn commits_each_record(&self) -> bool {
        false
    }

    fn may_commit(&self, open: u32) -> bool {
        open == 0
    }
}

/// `NVT_MUTANT=commit-per-page`: every dirty page logged and committed on its own, so a
/// crash can tear a section.
struct CommitPerPage;

impl Protocol for CommitPerPage {
    fn records<'r, 'a>(&self, runs: &'r [Run<'a>]) -> Vec<&'r [Run<'a>]> {
        runs.chunk_by(|a, b| a.offset / PAGE as u64 == b.offset / PAGE as u64)
            .collect()
    }

    fn commits_each_record(&self) -> bool {
        true
    }

    fn may_commit(&self, open: u32) -> bool {
        open == 0
    }
}

/// `NVT_MUTANT=no-dependence`: a section that ends while another is open commits anyway, so
/// it can become durable without the section it observed.
struct NoDependence;

impl Protocol for NoDependence {
    fn records<'r, 'a>(&self, runs: &'r [Run<'a>]) -> Vec<&'r [Run<'a>]> {
        vec![runs]
    }

    fn commits_each_record(&self) -> bool {
        false
    }

    fn may_commit(&self, _open: u32) -> bool {
        true
    }
}

/// The protocol of this run.
fn protocol() -> &'static dyn Protocol {
    match env().mutant {
        Some(Mutant::CommitPerPage) => &CommitPerPage,
        Some(Mutant::NoDependence) => &NoDependence,
        Some(Mutant::NoLogFlush) | None => &Correct,
    }
}

/// A dirty page of one merge: its number and, for a logged page, its runs.
struct DirtyPage {
    page: usize,
    spans: Vec<Span>,
}

impl Runtime {
    pub(super) fn take_token(&self) {
        self.take_token_until(None);
    }

    /// Takes the commit token, waiting until `deadline` at most; returns whether it is held.
    pub(super) fn take_token_until(&self, deadline: Option<(Clock, &libc::timespec)>) -> bool {
        if !get(&LOCAL.holds_token) {
            if !self.shared.token.lock_until(deadline) {
                return false;
            }
            set(&LOCAL.holds_token, true);
            self.refresh_kept();
        }
        true
    }

    /// Drops the private copies kept from earlier intervals of pages another process has
    /// published into since they were taken (called before reading shared data after
    /// synchronising, and before merging).
    pub(super) fn refresh_kept(&self) {
        self.tracker
            .catch_up()
            .unwrap_or_else(|e| fatal(&e.to_string()));
    }

    pub(super) fn give_token(&self) {
        if get(&LOCAL.holds_token) {
            set(&LOCAL.holds_token, false);
            self.shared.token.unlock();
        }
    }

    /// Logs this process's changes, commits if nothing is open and `commit` is asked,
    /// publishes the changes to the shared view and ends the tracking interval.
    /// Requires the token.
    pub(super) fn merge(&self, commit: bool, force_drop: bool) {
        assert!(get(&LOCAL.holds_token), "merge without the commit token");
        // Others' publishes first, so that this merge's own are not mistaken for theirs.
        self.refresh_kept();
        let logged_pages = self.publish_unlogged_and_diff();
        let images = self.after_images(&logged_pages);
        let logged = self.log_runs(&logged_pages, &images);
        self.append_and_commit(&logged, commit);
        for dirty in &logged_pages {
            if !dirty.spans.is_empty() {
                self.tracker.publish_page(dirty.page);
            }
        }
        self.end_interval(force_drop);
        self.release_pending_frees();
    }

    /// Publishes the unlogged dirty pages at once, word by word from the page and its twin,
    /// without building runs (a page of small scattered changes would cost a call and a
    /// compare-and-swap per run); returns the logged ones, diffed into runs for the log.
    /// Heap runs are logged and published; runs in adopted ranges (the program's globals)
    /// and the shared malloc region are only published: shared, not persistent.
    fn publish_unlogged_and_diff(&self) -> Vec<DirtyPage> {
        let tracker = self.tracker;
        let dirty = tracker.dirty_pages();
        Counters::add(&self.shared.counters.merged_pages, dirty.len() as u64);
        let mut logged = Vec::new();
        for page in dirty {
            if tracker.is_logged(page) {
                let mut spans = Vec::new();
                tracker.diff_page(page, &mut spans);
                logged.push(DirtyPage { page, spans });
            } else {
                tracker.publish_page(page);
            }
        }
        logged
    }

    /// A page whose runs would take more log space than the page itself (many scattered
    /// changes) is logged as its after-image: the shared page with this merge's runs
    /// applied. That is exact because merges are serialised by the token and the log is
    /// replayed in merge order; bytes of other sections in it were merged earlier, and if
    /// they are not committed yet neither is this record (an open section holds back every
    /// commit).
    fn after_images(&self, pages: &[DirtyPage]) -> Vec<Option<Vec<u8>>> {
        let heap_pages = self.heap_len as usize / PAGE;
        pages
            .iter()
            .map(|dirty| {
                (dirty.page < heap_pages && encoded_len(&dirty.spans) > PAGE + 16)
                    .then(|| self.tracker.after_image(dirty.page, &dirty.spans))
            })
            .collect()
    }

    /// The runs of one record: each logged page's runs (persistent globals minus the bytes
    /// the loader writes), or its after-image.
    fn log_runs<'a>(
        &'a self,
        pages: &'a [DirtyPage],
        images: &'a [Option<Vec<u8>>],
    ) -> Vec<Run<'a>> {
        let heap_pages = self.heap_len as usize / PAGE;
        let mut logged = Vec::new();
        for (dirty, image) in pages.iter().zip(images) {
            let page = dirty.page;
            let bytes = self.tracker.private_page(page);
            let page_runs = dirty.spans.iter().map(|span| Run {
                offset: (page * PAGE + span.start) as u64,
                bytes: &bytes[span.start..span.start + span.len],
            });
            match image {
                Some(image) => logged.push(Run {
                    offset: (page * PAGE) as u64,
                    bytes: image,
                }),
                None if page >= heap_pages => {
                    logged.extend(page_runs.flat_map(|run| without(run, &self.excluded)));
                }
                None => logged.extend(page_runs),
            }
        }
        logged
    }

    /// Appends one record of `logged` (if any) and, when `commit` is asked and no section is
    /// open, flips the epoch; checkpoints when the log is more than half full.
    fn append_and_commit(&self, logged: &[Run<'_>], commit: bool) {
        let guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        let journal = guard.as_ref().unwrap_or_else(|| fatal("merge after close"));
        let mut state = self.shared.journal_state();
        let counters = &self.shared.counters;
        let protocol = protocol();
        let records = if logged.is_empty() {
            Vec::new()
        } else {
            protocol.records(logged)
        };
        for runs in records {
            let lap = state.lap;
            let record = journal
                .append(&mut state, runs)
                .unwrap_or_else(|e| fatal(&log_error(&e)));
            LOCAL
                .last_epoch
                .store(state.committed + 1, Ordering::Relaxed);
            self.shared.set_journal_state(&state);
            let bytes: u64 = runs.iter().map(|run| run.bytes.len() as u64).sum();
            Counters::add(&counters.records, 1);
            Counters::add(&counters.logged_bytes, bytes);
            Counters::add(&counters.log_bytes, record);
            if state.lap != lap {
                Counters::add(&counters.checkpoints, 1);
            }
            if protocol.commits_each_record() && commit_point(journal, &mut state) {
                self.shared.set_journal_state(&state);
                Counters::add(&counters.commits, 1);
            }
        }
        let open = self.shared.open_sections.load(Ordering::Acquire);
        if commit && protocol.may_commit(open) {
            if commit_point(journal, &mut state) {
                self.shared.set_journal_state(&state);
                Counters::add(&counters.commits, 1);
            }
            if journal
                .maybe_checkpoint(&mut state)
                .unwrap_or_else(|e| fatal(&e.to_string()))
            {
                self.shared.set_journal_state(&state);
                Counters::add(&counters.checkpoints, 1);
            }
        }
    }

    /// After publishing: write-protects this interval's pages, keeping the private copies of
    /// pages no other process has published into since they were taken (lazy dropping, §3.2).
    fn end_interval(&self, force_drop: bool) {
        // The main process writes the unlogged regions in place (untracked): whenever it
        // synchronises, the others must drop copies that may predate its writes.
        if !self.is_child() && self.shared.live_threads.load(Ordering::Acquire) > 1 {
            self.tracker.publish_everything();
        }
        // A thread-process that is ending never touches these pages again: write-protecting
        // them and dropping its copies would only delay the thread's end (and its joiner).
        if !get(&LOCAL.exiting) {
            self.tracker
                .reset(force_drop)
                .unwrap_or_else(|e| fatal(&e.to_string()));
        }
    }

    /// Takes the token for a synchronisation operation; at depth 0 that commits the writes
    /// made since the thread's last synchronisation point.
    pub(super) fn begin(&self) {
        self.begin_until(None);
    }

    /// [`Runtime::begin`], giving up at `deadline` if the token is not free by then (a
    /// section of another thread runs); returns whether the token is held.
    pub(super) fn begin_until(&self, deadline: Option<(Clock, &libc::timespec)>) -> bool {
        if get(&LOCAL.holds_token) {
            return true;
        }
        self.apply_pending_name();
        if !self.take_token_until(deadline) {
            return false;
        }
        if depth() == 0 {
            self.merge(true, false);
        }
        true
    }

    /// Merges an open section without committing it, before giving up the token.
    pub(super) fn merge_open(&self) {
        if !get(&LOCAL.open) {
            set(&LOCAL.open, true);
            self.shared.open_sections.fetch_add(1, Ordering::AcqRel);
        }
        self.merge(false, true);
    }

    /// Ends a durable section (depth just became 0): merge, commit if nothing else is open.
    pub(super) fn end_section(&self) {
        if get(&LOCAL.open) {
            set(&LOCAL.open, false);
            self.shared.open_sections.fetch_sub(1, Ordering::AcqRel);
        }
        self.merge(true, false);
    }

    /// A synchronisation point with no lock taken: commit this thread's interval.
    pub fn sync_point(&self) {
        self.begin();
        if depth() == 0 {
            self.give_token();
        }
    }

    /// Gives up the token to block: an open section is merged (not committed) first.
    pub(super) fn release_for_wait(&self) {
        if depth() > 0 {
            self.merge_open();
        }
        self.give_token();
    }

    /// After blocking: drop private copies others may have made stale, and take the token
    /// back if a section is open.
    pub(super) fn after_wait(&self) {
        self.refresh_kept();
        if depth() > 0 {
            self.take_token();
        }
    }

    /// First run of this executable with persistent globals: logs their current contents
    /// (their initial values; excluded bytes left out) and records the executable's
    /// fingerprint in the heap metadata, in one commit. If another executable's globals are
    /// in the reservation, the log is checkpointed and the reservation cleared first (a
    /// crash before the commit leaves the old fingerprint, and the next start does this
    /// again).
    pub(super) fn record_globals(&self, layout: &super::layout::GlobalsLayout) {
        self.take_token();
        let reserved = layout.pool_heap_len - layout.heap_len;
        let images = self.globals_images(layout);
        let runs = nonzero_runs(&images, &self.excluded);
        {
            let guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
            let journal = guard
                .as_ref()
                .unwrap_or_else(|| fatal("logging globals after close"));
            let mut state = self.shared.journal_state();
            let (_, fingerprint, _) = heapmeta::globals(self.heap_meta());
            if fingerprint != 0 {
                journal
                    .checkpoint(&mut state)
                    .unwrap_or_else(|e| fatal(&e.to_string()));
                journal.clear_home(layout.heap_len, reserved);
            }
            // Records of at most a quarter of the log each.
            let budget = journal.geometry().log_len / 4;
            for batch in batches(&runs, budget) {
                journal
                    .append(&mut state, batch)
                    .unwrap_or_else(|e| fatal(&log_error(&e)));
            }
            self.shared.set_journal_state(&state);
        }
        heapmeta::set_globals(
            self.meta(),
            reserved,
            layout.globals.fingerprint,
            layout.globals.len() as u64,
        );
        self.merge(true, false);
        self.give_token();
    }

    /// The globals' current bytes (their shared view), with their heap offsets.
    fn globals_images(&self, layout: &super::layout::GlobalsLayout) -> Vec<(usize, Vec<u8>)> {
        let mut images = Vec::new();
        let mut offset = layout.heap_len as usize;
        for &(_, len) in &layout.globals.ranges {
            let mut bytes = vec![0u8; len];
            self.tracker.read_shared_at(offset, &mut bytes);
            images.push((offset, bytes));
            offset += len;
        }
        images
    }
}

/// The runs of the non-zero bytes of `images` (the reservation is zero until now), minus
/// the `excluded` offsets.
fn nonzero_runs<'a>(images: &'a [(usize, Vec<u8>)], excluded: &[(u64, u64)]) -> Vec<Run<'a>> {
    let zero = [0u8; PAGE];
    let mut runs = Vec::new();
    let mut spans = Vec::new();
    for (offset, bytes) in images {
        for (index, page) in bytes.chunks(PAGE).enumerate() {
            spans.clear();
            crate::diff::spans(page, &zero[..page.len()], &mut spans);
            let base = offset + index * PAGE;
            runs.extend(spans.iter().flat_map(|span| {
                without(
                    Run {
                        offset: (base + span.start) as u64,
                        bytes: &page[span.start..span.start + span.len],
                    },
                    excluded,
                )
            }));
        }
    }
    runs
}

/// Consecutive slices of `runs` of about `budget` log bytes each (at least one run).
fn batches<'r, 'a>(runs: &'r [Run<'a>], budget: u64) -> Vec<&'r [Run<'a>]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < runs.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < runs.len() && (end == start || bytes < budget) {
            bytes += 16 + runs[end].bytes.len() as u64;
            end += 1;
        }
        out.push(&runs[start..end]);
        start = end;
    }
    out
}

/// Flips the epoch if records are pending (the run ends if the commit word cannot hold the
/// next epoch).
fn commit_point(journal: &crate::pfail::RtJournal, state: &mut crate::JournalState) -> bool {
    journal
        .commit(state)
        .unwrap_or_else(|e| fatal(&e.to_string()))
}

/// Log bytes of a page's runs as record entries (header plus bytes padded to 8).
fn encoded_len(spans: &[Span]) -> usize {
    spans
        .iter()
        .map(|span| 16 + span.len.next_multiple_of(8))
        .sum()
}

/// The message for a failed log operation (a full log names the settings to change).
fn log_error(error: &crate::NvtError) -> String {
    match error {
        crate::NvtError::LogFull { .. } => format!(
            "{error}: the changes of one synchronisation interval, together with those of \
             sections still open in cond_wait, must fit in the log; create the pool with a \
             larger NVT_LOG_MB"
        ),
        _ => error.to_string(),
    }
}

/// The parts of `run` outside the sorted `excluded` offset ranges.
pub(super) fn without<'a>(run: Run<'a>, excluded: &[(u64, u64)]) -> Vec<Run<'a>> {
    let mut parts = Vec::new();
    let (mut at, end) = (run.offset, run.offset + run.bytes.len() as u64);
    for &(start, stop) in excluded {
        if stop <= at {
            continue;
        }
        if start >= end {
            break;
        }
        if start > at {
            parts.push(Run {
                offset: at,
                bytes: &run.bytes[(at - run.offset) as usize..(start - run.offset) as usize],
            });
        }
        at = at.max(stop);
    }
    if at < end {
        parts.push(Run {
            offset: at,
            bytes: &run.bytes[(at - run.offset) as usize..],
        });
    }
    parts
}
