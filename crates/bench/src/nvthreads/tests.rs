//! The evaluation's C programs in quick mode: every kernel built from one source gives the
//! pthreads result under the runtime (with `malloc` shared, and with every `malloc`
//! persistent), the page benchmark runs, the lock-heavy kernel gives pthreads' ledger at
//! every thread count, the one-line sections are profiled step by step (a hot page takes no
//! fault, a new page does), and the crash-tolerant k-means killed mid-way resumes and
//! converges to the uninterrupted run's centroids. (`ferrite eval --only
//! nvthreads` runs the full-size measurements.)

use super::*;

#[test]
fn kernels_page_benchmark_and_kmeans_recovery_in_quick_mode() {
    assert!(
        find_cc().is_some(),
        "the evaluation programs need a C compiler `cc` (apt-get install gcc)"
    );
    let scratch = tempfile::Builder::new()
        .prefix("nvthreads-eval")
        .tempdir_in(pmem::DEFAULT_POOL_DIR)
        .expect("scratch dir");
    let settings = Settings::new(scratch.path().to_path_buf(), true);
    let programs = Programs::build(&settings).expect("build the programs");
    let results = kernels(&programs, &settings, &mut |_| {}).expect("run the kernels");
    assert_eq!(results.len(), KERNELS.len());
    for result in &results {
        assert!(
            result.digests_match,
            "{}: a runtime run's result differs from pthreads'",
            result.kernel.name
        );
        let persistent = result.stats(Variant::PersistentMalloc);
        assert!(
            persistent.logged_bytes > 0 && persistent.commits > 0,
            "{}: with every malloc persistent the input must be logged: {persistent:?}",
            result.kernel.name
        );
        eprintln!(
            "{}: pthreads {:.4} s, nvthreads {:.4} s ({:.2}x), persistent malloc {:.4} s",
            result.kernel.name,
            result.compute(Variant::Pthreads),
            result.compute(Variant::Nvthreads),
            result.slowdown(Variant::Nvthreads),
            result.compute(Variant::PersistentMalloc)
        );
    }
    let (per_round, stats) = pages::page_round_time(
        &programs,
        &settings,
        Variant::PersistentMalloc,
        PAGE_PERCENTS[0],
        5,
        0,
    )
    .expect("page benchmark");
    assert!(per_round > 0.0 && stats.logged_bytes > 0, "{stats:?}");
    let bank = bank(&programs, &settings, &mut |_| {}).expect("lock-heavy kernel");
    assert_eq!(bank.len(), BANK_THREADS.len());
    for point in &bank {
        assert!(
            point.digests_match && point.stats.records > 0,
            "bank with {} workers: the runtime's ledger differs or logged nothing: {point:?}",
            point.threads
        );
    }
    let costs = section_cost(&programs, &settings, &mut |_| {}).expect("one-line sections");
    for cost in &costs {
        let step = |wanted: Step| {
            cost.steps
                .iter()
                .find(|(step, ..)| *step == wanted)
                .map_or(0.0, |&(_, events, _)| events)
        };
        assert!(
            step(Step::Append) >= 0.99 && step(Step::Diff) >= 0.99,
            "{:?}: every section is diffed and appended once: {:?}",
            cost.shape,
            cost.steps
        );
        let faults = step(Step::Fault);
        match cost.shape {
            SectionShape::Hot => assert!(faults < 0.01, "a hot page takes no fault: {faults}"),
            // Each section writes the next of 256 pages, more than stay hot, so every page
            // comes back write-protected; one fault makes at most a window of 16 pages
            // writable (docs/nvthreads.md §3.2), hence at least one fault per 16 sections.
            SectionShape::Cold => assert!(faults > 0.05, "new pages fault: {faults}"),
        }
    }
    let recovery = kmeans_recovery(&programs, &settings, &[0.5], &mut |_| {})
        .expect("k-means crash experiment");
    let point = &recovery.points[0];
    assert!(
        point.same_result,
        "resumed k-means must converge to the same centroids: {recovery:?}"
    );
    assert!(
        point.resumed_from >= point.killed_after && point.resumed_from > 0,
        "the restart must resume from the recovered iteration: {recovery:?}"
    );
    assert_eq!(
        point.resumed_from + point.iterations_after,
        recovery.iterations,
        "resumed run: {recovery:?}"
    );
}
