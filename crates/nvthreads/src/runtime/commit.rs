//! Merges, log appends, commits and groups (`docs/nvthreads.md` §3.5, §5).
//!
//! - A **merge** turns the writes a thread made since its last synchronisation point into
//!   one record: its dirty pages are diffed against their twins, the runs (or, for a page of
//!   scattered changes, a masked page) are appended to the thread's own lane of the log,
//!   flushed and fenced, and then published into the shared view. Threads merge at the same
//!   time without waiting for each other: each has its lane, and publishing merges words.
//! - A record of a section that depends on no open section commits by itself: when the
//!   outermost unlock returns, the section is durable. The sequence number taken just
//!   before the append orders the records of all lanes for replay: a section that acquires
//!   a mutex after another released it takes a larger number, so conflicting writes replay
//!   in the order they happened.
//! - A section that blocks while holding locks, and so exposes its writes early, is *open*:
//!   its records and those of every section that synchronised with it carry its group and
//!   commit together when the group's close record is appended (`crate::groups`).
//! - A checkpoint (exclusive, through the log's gate) replays the committed records into
//!   the home image when a lane fills.

use super::env::{Mutant, env};
use super::{LOCAL, Runtime, fatal, get, me, set};
use crate::diff::Span;
use crate::groups::Leave;
use crate::journal::Mutation;
use crate::pages::PAGE;
use crate::profile::Step;
use crate::record::{self, Entry, Kind, MaskedPage, Meta, Run};
use crate::shared::{Counters, Shared};
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

/// A persistence step (every fence of the log protocol: recovery, append, checkpoint):
/// counts it across all thread-processes and, at the `NVT_CRASH_AT`-th, kills the process
/// group — with `NVT_PFAIL`, after rolling back the pool's pending lines as a power failure
/// just before that fence would (`crate::pfail`).
pub(super) fn step() {
    if env().crash_at.is_none() {
        // The count is read only to find the `NVT_CRASH_AT`-th step: without it, no process
        // touches the shared counter (a line every append of every process would write).
        return;
    }
    let n = match SHARED.get() {
        Some(shared) => shared.steps.fetch_add(1, Ordering::Relaxed) + 1,
        None => EARLY_STEPS.fetch_add(1, Ordering::Relaxed) + 1,
    };
    if env().crash_at == Some(n) {
        crate::pfail::power_failure(n, env().stats);
        // SAFETY: kill(0, SIGKILL) signals our own process group.
        unsafe { libc::syscall(libc::SYS_kill, 0, libc::SIGKILL) };
    }
}

/// The journal's own bug selected by `NVT_MUTANT` (tests only).
pub(super) fn journal_mutation() -> Mutation {
    match env().mutant {
        Some(Mutant::NoLogFlush) => Mutation::NoLogFlush,
        _ => Mutation::None,
    }
}

/// How a merge's entries become records and which group they carry: the correct protocol,
/// or one of the deliberate bugs the C-program tests must catch (`NVT_MUTANT`), chosen once
/// at start-up ([`protocol`]), so the merge itself has no test-only branch.
trait Protocol: Sync {
    /// Calls `append` with each record one merge's entries are appended as (correct: one,
    /// so a section's pages are all or nothing).
    fn records(&self, entries: &[Entry<'_>], append: &mut dyn FnMut(&[Entry<'_>]));
    /// The group a record of a thread depending on `group` carries; `member`: the thread's
    /// own section is open (correct: `group`, so a section that observed an open one
    /// commits with it).
    fn group(&self, group: u64, member: bool) -> u64;
}

/// The protocol of `docs/nvthreads.md` §5.
struct Correct;

impl Protocol for Correct {
    fn records(&self, entries: &[Entry<'_>], append: &mut dyn FnMut(&[Entry<'_>])) {
        append(entries);
    }

    fn group(&self, group: u64, _member: bool) -> u64 {
        group
    }
}

/// `NVT_MUTANT=commit-per-page`: every dirty page logged and committed on its own, so a
/// crash can tear a section.
struct CommitPerPage;

impl Protocol for CommitPerPage {
    fn records(&self, entries: &[Entry<'_>], append: &mut dyn FnMut(&[Entry<'_>])) {
        entries
            .chunk_by(|a, b| page_of(a) == page_of(b))
            .for_each(append);
    }

    fn group(&self, group: u64, _member: bool) -> u64 {
        group
    }
}

/// `NVT_MUTANT=no-dependence`: a section that depends on an open one commits on its own, so
/// it can become durable without the section it observed.
struct NoDependence;

impl Protocol for NoDependence {
    fn records(&self, entries: &[Entry<'_>], append: &mut dyn FnMut(&[Entry<'_>])) {
        append(entries);
    }

    fn group(&self, group: u64, member: bool) -> u64 {
        if member { group } else { 0 }
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

fn page_of(entry: &Entry<'_>) -> u64 {
    match entry {
        Entry::Run(run) => run.offset / PAGE as u64,
        Entry::Masked(page) => page.offset / PAGE as u64,
    }
}

/// How a merge ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MergeEnd {
    /// A synchronisation point outside sections: the writes since the last one commit.
    Interval,
    /// The outermost unlock: the section commits (with its group, if it has one).
    Section,
    /// An open section exposes its writes: they commit with its group later.
    Open,
}

/// A logged dirty page of one merge: its runs, and the masked form when that is smaller.
#[derive(Debug, Default)]
struct LoggedPage {
    page: usize,
    spans: Vec<Span>,
    /// Whether the page is logged in its masked form (`mask`, `bytes`).
    masked: bool,
    mask: Vec<u8>,
    bytes: Vec<u8>,
}

/// The buffers of a process's merges, kept across merges so that the common path allocates
/// nothing once they have grown to the largest merge.
#[derive(Debug, Default)]
pub(super) struct MergeBuffers {
    /// The dirty pages of the merge.
    dirty: Vec<usize>,
    /// Its logged pages: the first `logged` are this merge's; the others keep their
    /// buffers for later merges.
    pages: Vec<LoggedPage>,
    logged: usize,
    /// Its record's entries (empty between merges: they borrow the pages).
    entries: Vec<Entry<'static>>,
    /// Its record's body.
    body: Vec<u8>,
}

/// `entries` emptied, as a vector of entries of another lifetime on the same allocation
/// (the standard library collects a vector's own iterator into its allocation when the
/// element layouts match, as they do here).
fn recycle<'b>(mut entries: Vec<Entry<'_>>) -> Vec<Entry<'b>> {
    entries.clear();
    entries
        .into_iter()
        .map(|_| unreachable!("the vector is empty"))
        .collect()
}

impl Runtime {
    /// The group this thread depends on, if it is still pending (0 otherwise).
    pub(super) fn dependency(&self) -> u64 {
        let group = LOCAL.group.load(Ordering::Relaxed);
        if group != 0 && !self.shared.groups.is_pending(group) {
            LOCAL.group.store(0, Ordering::Relaxed);
            return 0;
        }
        group
    }

    /// After synchronising with something that depended on `dep` (an acquired mutex's last
    /// releaser, a signaller, a barrier's arrivals, a joined thread): depend on it too, and
    /// drop or refresh the private copies of pages others published into.
    pub(super) fn after_acquire(&self, dep: u64) {
        if dep != 0 && self.shared.groups.is_pending(dep) {
            let current = self.dependency();
            let joined = self
                .shared
                .groups
                .join(current, dep)
                .unwrap_or_else(|e| fatal(&e.to_string()));
            LOCAL.group.store(joined, Ordering::Relaxed);
        }
        self.refresh_kept();
    }

    /// Drops the private copies kept from earlier intervals of pages another process has
    /// published into since they were taken, and rebases dirty ones (after synchronising).
    pub(super) fn refresh_kept(&self) {
        let _timer = self.shared.profile.time(Step::CatchUp);
        let _held_off = super::signals::HandlersHeldOff::new();
        self.tracker
            .catch_up()
            .unwrap_or_else(|e| fatal(&e.to_string()));
    }

    /// A synchronisation point outside sections: commits this thread's writes since its
    /// last one.
    pub fn sync_point(&self) {
        self.merge(MergeEnd::Interval, false);
    }

    /// [`Runtime::sync_point`] for an operation at depth 0 (lock, wait, create, join); a
    /// name another thread set for this one takes effect here.
    pub(super) fn sync_interval(&self) {
        let _timer = self.shared.profile.time(Step::Interval);
        self.apply_pending_name();
        self.merge(MergeEnd::Interval, false);
    }

    /// Ends a durable section (depth just became 0): merge, commit, and close its group if
    /// it was the group's last open member.
    pub(super) fn end_section(&self) {
        self.end_section_then(|| {});
    }

    /// [`Runtime::end_section`], with `hand_over` (the release of the section's mutexes)
    /// run as soon as the section's writes are logged, committed (with its group's close)
    /// and published — before the end of the tracking interval, which only this process's
    /// own pages depend on (`docs/nvthreads.md` §5.5). A section that freed blocks on pages
    /// it wrote ends its interval first: those blocks go back to the allocator only after
    /// the reset, and the next holder may want them.
    pub(super) fn end_section_then(&self, hand_over: impl FnOnce()) {
        let profile = &self.shared.profile;
        if crate::profile::enabled() {
            // Unprofiled, no shared line is touched for the count (read only when profiled).
            profile.sections.fetch_add(1, Ordering::Relaxed);
        }
        let _held_off = super::signals::HandlersHeldOff::new();
        let handover = profile.time(Step::Handover);
        self.merge_published(MergeEnd::Section);
        let reset_first = self.has_pending_frees();
        if reset_first {
            self.finish_interval(false);
        }
        drop(handover);
        hand_over();
        if !reset_first {
            self.finish_interval(false);
        }
    }

    /// Opens the section: it joins (or starts) a group and its writes are merged without
    /// committing, so that others may see them before it ends. `force_drop` discards the
    /// private copies afterwards (before a fork).
    pub(super) fn open_section(&self, force_drop: bool) {
        if !get(&LOCAL.member) {
            let group = self
                .shared
                .groups
                .open_member(self.dependency())
                .unwrap_or_else(|e| fatal(&e.to_string()));
            LOCAL.group.store(group, Ordering::Relaxed);
            set(&LOCAL.member, true);
            Counters::add(&self.shared.counters.of(me()).groups, 1);
        }
        self.merge(MergeEnd::Open, force_drop);
    }

    /// Logs this process's changes, publishes them to the shared view and ends the tracking
    /// interval; at a section's end, leaves its group (closing it if last).
    pub(super) fn merge(&self, end: MergeEnd, force_drop: bool) {
        let _held_off = super::signals::HandlersHeldOff::new();
        self.merge_published(end);
        self.finish_interval(force_drop);
    }

    /// The part of a merge others depend on: this process's changes logged (and committed,
    /// or its group closed) and published into the shared view. The tracking interval is
    /// not ended yet ([`Runtime::finish_interval`]).
    fn merge_published(&self, end: MergeEnd) {
        // A merge reached again from inside a merge (none is known) gets fresh buffers.
        let mut reused = self.merge_buffers.try_lock().ok();
        let mut fresh = MergeBuffers::default();
        let buffers = reused.as_deref_mut().unwrap_or(&mut fresh);
        self.merge_with(end, buffers);
    }

    /// Ends the tracking interval after [`Runtime::merge_published`]: write-protects the
    /// pages that cool down (or drops every private copy, `force_drop`), then releases the
    /// frees that waited for this merge. Nothing here is read by another process: it
    /// changes this process's protections, dirty list, twins and idle counts only, and a
    /// publish another process makes meanwhile stays in its ring for this process's next
    /// catch-up (`docs/nvthreads.md` §5.5).
    fn finish_interval(&self, force_drop: bool) {
        let _reset = self.shared.profile.time(Step::Reset);
        self.end_interval(force_drop);
        // After the reset: a block is released only once no write of this process to its
        // page is left unmerged (a cooled page's next write faults and is tracked again).
        self.release_pending_frees();
    }

    /// [`Runtime::merge_published`] with `buffers`.
    fn merge_with(&self, end: MergeEnd, buffers: &mut MergeBuffers) {
        let profile = &self.shared.profile;
        let diff = profile.time(Step::Diff);
        self.publish_unlogged_and_diff(buffers);
        let MergeBuffers {
            pages,
            logged,
            entries,
            body,
            ..
        } = buffers;
        let pages = &pages[..*logged];
        let mut record = recycle(std::mem::take(entries));
        self.entries(pages, &mut record);
        drop(diff);
        if !record.is_empty() {
            let _append = profile.time(Step::Append);
            protocol().records(&record, &mut |entries| self.log_data(entries, body));
        }
        *entries = recycle(record);
        if end == MergeEnd::Section && get(&LOCAL.member) {
            set(&LOCAL.member, false);
            let group = LOCAL.group.load(Ordering::Relaxed);
            if let Leave::Close(ids) = self.shared.groups.leave_member(group) {
                self.close_group(&ids);
            }
        }
        let publish = profile.time(Step::Publish);
        for dirty in pages {
            self.tracker.publish_spans(dirty.page, &dirty.spans);
        }
        drop(publish);
        self.publish_main_in_place();
    }

    /// Publishes the unlogged dirty pages at once, word by word from the page and its twin,
    /// without building runs (a page of small scattered changes would cost a call and a
    /// compare-and-swap per run); diffs the logged ones into runs for the log, the changed
    /// ones into `buffers.pages[..buffers.logged]` (an unchanged hot page is left out, so
    /// the record and the publish visit only pages with runs). Heap runs are logged and published; runs in
    /// adopted ranges (the program's globals) and the shared malloc region are only
    /// published: shared, not persistent.
    fn publish_unlogged_and_diff(&self, buffers: &mut MergeBuffers) {
        let tracker = self.tracker;
        let MergeBuffers {
            dirty,
            pages,
            logged,
            ..
        } = buffers;
        tracker.dirty_pages_into(dirty);
        Counters::add(
            &self.shared.counters.of(me()).merged_pages,
            dirty.len() as u64,
        );
        let heap_pages = self.heap_len as usize / PAGE;
        *logged = 0;
        for &page in dirty.iter() {
            if !tracker.is_logged(page) {
                tracker.publish_page(page);
                continue;
            }
            if *logged == pages.len() {
                pages.push(LoggedPage::default());
            }
            let entry = &mut pages[*logged];
            entry.page = page;
            entry.spans.clear();
            tracker.diff_page(page, &mut entry.spans);
            if entry.spans.is_empty() {
                // A hot page this interval did not write: nothing to log or publish (its
                // slot is reused by the next changed page).
                continue;
            }
            entry.masked = page < heap_pages && masked_len(&entry.spans) < runs_len(&entry.spans);
            if entry.masked {
                let private = tracker.private_page(page);
                masked_form(private, &entry.spans, &mut entry.mask, &mut entry.bytes);
            }
            *logged += 1;
        }
    }

    /// The entries of one record, appended to `entries`: each logged page's runs
    /// (persistent globals minus the bytes the loader writes), or its masked form when that
    /// is smaller (a page of many scattered changes). Never more than the bytes this thread
    /// changed: another thread may be publishing other bytes of the same page at the same
    /// moment.
    fn entries<'a>(&'a self, pages: &'a [LoggedPage], entries: &mut Vec<Entry<'a>>) {
        let heap_pages = self.heap_len as usize / PAGE;
        for logged in pages {
            let page = logged.page;
            if logged.masked {
                entries.push(Entry::Masked(MaskedPage {
                    offset: (page * PAGE) as u64,
                    mask: &logged.mask,
                    bytes: &logged.bytes,
                }));
                continue;
            }
            let bytes = self.tracker.private_page(page);
            let runs = logged.spans.iter().map(|span| Run {
                offset: (page * PAGE + span.start) as u64,
                bytes: &bytes[span.start..span.start + span.len],
            });
            if page >= heap_pages {
                entries.extend(
                    runs.flat_map(|run| without(run, &self.excluded))
                        .map(Entry::Run),
                );
            } else {
                entries.extend(runs.map(Entry::Run));
            }
        }
    }

    /// Appends one data record of `entries` (its body encoded into `body`), tagged with the
    /// group this thread depends on (if still pending when the record is written).
    pub(super) fn log_data(&self, entries: &[Entry<'_>], body: &mut Vec<u8>) {
        record::data_body_into(entries, body);
        let member = get(&LOCAL.member);
        let wanted = protocol().group(self.dependency(), member);
        let (seq, group) = self.append_record(Kind::Data, body, wanted, &|| {});
        LOCAL.last_seq.store(seq, Ordering::Relaxed);
        if group == 0 {
            LOCAL.durable_seq.store(seq, Ordering::Relaxed);
        }
        let counters = self.shared.counters.of(me());
        let bytes: u64 = entries
            .iter()
            .map(|entry| match entry {
                Entry::Run(run) => run.bytes.len() as u64,
                Entry::Masked(page) => page.bytes.len() as u64,
            })
            .sum();
        Counters::add(&counters.records, 1);
        Counters::add(&counters.logged_bytes, bytes);
        Counters::add(&counters.log_bytes, record::record_len(body.len() as u64));
        if group == 0 {
            Counters::add(&counters.commits, 1);
        }
    }

    /// Appends the close record of a group's `ids` (every member's section ended) and marks
    /// them durable before any checkpoint can run.
    fn close_group(&self, ids: &[u64]) {
        let body = record::close_body(ids);
        let groups = &self.shared.groups;
        self.append_record(Kind::Close, &body, 0, &|| groups.mark_durable(ids));
        Counters::add(&self.shared.counters.of(me()).commits, 1);
    }

    /// Appends a record of `kind` to this thread's lane: sequence number, lap and group
    /// (`wanted`, or 0 if it is durable by now) fixed inside the log's gate, so no
    /// checkpoint runs between them and the append; `then` runs inside the gate after the
    /// record is durable. A full lane is emptied by a checkpoint first; a record larger than
    /// a lane goes the exclusive way ([`Runtime::append_spread`]). Returns the record's
    /// sequence number and group.
    fn append_record(&self, kind: Kind, body: &[u8], wanted: u64, then: &dyn Fn()) -> (u64, u64) {
        let log = &self.shared.log;
        let lane = me() as usize % self.lanes;
        let mut checkpoints = 0;
        loop {
            log.gate.enter();
            let group = self.shared.groups.tag(wanted);
            let meta = Meta {
                lap: log.lap.load(Ordering::Acquire),
                seq: log.next_seq.fetch_add(1, Ordering::AcqRel) + 1,
                group,
                kind,
            };
            let slot = &log.lanes[lane];
            slot.lock.lock();
            super::signals::fail_point(super::env::FailPoint::Lane);
            let mut tail = slot.tail.load(Ordering::Acquire);
            let result = self.with_journal(|journal| journal.append(lane, &mut tail, meta, body));
            slot.tail.store(tail, Ordering::Release);
            slot.lock.unlock();
            match result {
                Ok(_) => {
                    then();
                    log.gate.leave();
                    if tail > self.lane_len / 2 {
                        // Half full: empty the log now, so that it never fills in the middle
                        // of a section and recovery has little to replay.
                        self.checkpoint(None);
                    }
                    return (meta.seq, group);
                }
                Err(crate::NvtError::LaneFull { needed, free, .. }) => {
                    log.gate.leave();
                    if checkpoints == 3 {
                        // The records of open sections fill the lane by themselves (three
                        // checkpoints in a row made no room).
                        let pending = crate::NvtError::LogFull {
                            needed,
                            free,
                            pending: 1,
                        };
                        fatal(&log_error(&pending));
                    }
                    self.checkpoint(Some((lane, needed)));
                    checkpoints += 1;
                }
                Err(crate::NvtError::LogFull { .. }) => {
                    log.gate.leave();
                    return self.append_spread(kind, body, wanted, then);
                }
                Err(error) => fatal(&log_error(&error)),
            }
        }
    }

    /// Runs `f` on the journal (the run ends if it was closed).
    fn with_journal<T>(&self, f: impl FnOnce(&crate::pfail::RtJournal) -> T) -> T {
        let guard = self.journal.lock().unwrap_or_else(|e| e.into_inner());
        let journal = guard
            .as_ref()
            .unwrap_or_else(|| fatal("the log is used after the pool was closed"));
        f(journal)
    }

    /// Empties the log: replays the committed records into the home image (exclusive: the
    /// gate is closed while it runs). `needed`: the lane and record size that asked for it;
    /// skipped if another thread's checkpoint made room meanwhile.
    pub(super) fn checkpoint(&self, needed: Option<(usize, u64)>) {
        let _timer = self.shared.profile.time(Step::Checkpoint);
        let log = &self.shared.log;
        log.gate.close();
        super::signals::fail_point(super::env::FailPoint::Checkpoint);
        let room = |(lane, len): (usize, u64)| {
            log.lanes[lane].tail.load(Ordering::Acquire) + len <= self.lane_len
        };
        if !needed.is_some_and(room) {
            self.checkpoint_closed();
        }
        log.gate.open();
    }

    /// The checkpoint proper; the gate is closed.
    fn checkpoint_closed(&self) {
        let log = &self.shared.log;
        let mut state = log.state(self.lanes);
        self.with_journal(|journal| journal.checkpoint(&mut state))
            .unwrap_or_else(|e| fatal(&log_error(&e)));
        log.set_state(&state);
        Counters::add(&self.shared.counters.of(me()).checkpoints, 1);
    }

    /// A record larger than a lane: with the gate closed (no other append meanwhile), after
    /// a checkpoint, its entries are spread over as many records as needed in any lanes,
    /// all of one group, closed at once unless they belong to the group this thread
    /// depends on (which closes them later).
    fn append_spread(&self, kind: Kind, body: &[u8], wanted: u64, then: &dyn Fn()) -> (u64, u64) {
        assert_eq!(kind, Kind::Data, "close records are small");
        let log = &self.shared.log;
        log.gate.close();
        self.checkpoint_closed();
        let pending = self.shared.groups.tag(wanted);
        let group = if pending != 0 {
            pending
        } else {
            self.shared.groups.fresh_id()
        };
        let heap_len = self.with_journal(|j| j.geometry().heap_len);
        let entries = record::parse_body(body, heap_len).unwrap_or_else(|e| fatal(&e.to_string()));
        let mut last = 0;
        for chunk in self.spread_chunks(&entries) {
            last = self.append_anywhere(Kind::Data, &record::data_body(chunk), group);
        }
        if pending == 0 {
            self.append_anywhere(Kind::Close, &record::close_body(&[group]), 0);
        }
        then();
        log.gate.open();
        (last, pending)
    }

    /// `entries` cut into pieces that each fit a lane.
    fn spread_chunks<'r, 'a>(&self, entries: &'r [Entry<'a>]) -> Vec<&'r [Entry<'a>]> {
        let room = self.lane_len - record::HEADER_LEN - 64;
        let mut chunks = Vec::new();
        let (mut start, mut bytes) = (0, 0);
        for (index, entry) in entries.iter().enumerate() {
            let len = record::entry_len(entry);
            if index > start && bytes + len > room {
                chunks.push(&entries[start..index]);
                (start, bytes) = (index, 0);
            }
            bytes += len;
        }
        chunks.push(&entries[start..]);
        chunks
    }

    /// Appends a record in the first lane with room (the gate is closed); the run ends if
    /// none has.
    fn append_anywhere(&self, kind: Kind, body: &[u8], group: u64) -> u64 {
        let log = &self.shared.log;
        let seq = log.next_seq.fetch_add(1, Ordering::AcqRel) + 1;
        let meta = Meta {
            lap: log.lap.load(Ordering::Acquire),
            seq,
            group,
            kind,
        };
        for lane in 0..self.lanes {
            let mut tail = log.lanes[lane].tail.load(Ordering::Acquire);
            match self.with_journal(|journal| journal.append(lane, &mut tail, meta, body)) {
                Ok(_) => {
                    log.lanes[lane].tail.store(tail, Ordering::Release);
                    return seq;
                }
                Err(crate::NvtError::LaneFull { .. }) => {}
                Err(error) => fatal(&log_error(&error)),
            }
        }
        fatal(&log_error(&crate::NvtError::LogFull {
            needed: record::record_len(body.len() as u64),
            free: 0,
            pending: 0,
        }))
    }

    /// The main process writes the unlogged regions in place (untracked): when
    /// thread-processes keep private copies of them (`NVT_ISOLATE_VOLATILE=1`), they must
    /// drop those that may predate its writes whenever it synchronises — part of the
    /// publish, so before anything is handed over.
    fn publish_main_in_place(&self) {
        if env().isolate_volatile
            && !self.is_child()
            && self.shared.live_threads.load(Ordering::Acquire) > 1
        {
            self.tracker.publish_everything();
        }
    }

    /// After publishing: write-protects this interval's pages, keeping the private copies
    /// (lazy dropping, §3.2).
    fn end_interval(&self, force_drop: bool) {
        // A thread-process that is ending never touches these pages again: write-protecting
        // them and dropping its copies would only delay the thread's end (and its joiner).
        if !get(&LOCAL.exiting) {
            self.tracker
                .reset(force_drop)
                .unwrap_or_else(|e| fatal(&e.to_string()));
        }
    }

    /// First run of this executable with persistent globals: logs their current contents
    /// (their initial values; excluded bytes left out) and records the executable's
    /// fingerprint in the heap metadata, as one group that commits at once. If another
    /// executable's globals are in the reservation, the log is checkpointed and the
    /// reservation cleared first (a crash before the close leaves the old fingerprint, and
    /// the next start does this again).
    pub(super) fn record_globals(&self, layout: &super::layout::GlobalsLayout) {
        let reserved = layout.pool_heap_len - layout.heap_len;
        let (_, fingerprint, _) = crate::heapmeta::globals(self.heap_meta());
        if fingerprint != 0 {
            self.checkpoint(None);
            self.with_journal(|journal| journal.clear_home(layout.heap_len, reserved));
        }
        let images = self.globals_images(layout);
        let runs = nonzero_runs(&images, &self.excluded);
        self.lock_heap();
        self.open_section(false);
        // Records of at most a quarter of a lane each, all in the section's group.
        let budget = self.lane_len / 4;
        for batch in batches(&runs, budget) {
            let entries: Vec<Entry<'_>> = batch.iter().copied().map(Entry::Run).collect();
            self.log_data(&entries, &mut Vec::new());
        }
        crate::heapmeta::set_globals(
            self.meta(),
            reserved,
            layout.globals.fingerprint,
            layout.globals.len() as u64,
        );
        self.unlock_heap();
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

/// Log bytes of a page's runs as record entries (header plus bytes padded to 8).
fn runs_len(spans: &[Span]) -> usize {
    spans
        .iter()
        .map(|span| record::ENTRY_HEADER_LEN as usize + span.len.next_multiple_of(8))
        .sum()
}

/// Log bytes of a page's masked entry.
fn masked_len(spans: &[Span]) -> usize {
    let changed: usize = spans.iter().map(|span| span.len).sum();
    record::ENTRY_HEADER_LEN as usize + record::MASK_LEN + changed.next_multiple_of(8)
}

/// The mask and changed bytes of a page whose changes are `spans`, into `mask` and `bytes`
/// (their allocations reused).
fn masked_form(page: &[u8], spans: &[Span], mask: &mut Vec<u8>, bytes: &mut Vec<u8>) {
    mask.clear();
    mask.resize(record::MASK_LEN, 0);
    bytes.clear();
    for span in spans {
        for at in span.start..span.start + span.len {
            mask[at / 8] |= 1 << (at % 8);
        }
        bytes.extend_from_slice(&page[span.start..span.start + span.len]);
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

/// The message for a failed log operation (a full log names the settings to change).
fn log_error(error: &crate::NvtError) -> String {
    match error {
        crate::NvtError::LogFull { .. } => format!(
            "{error}: the changes of one synchronisation interval, and the records of \
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
