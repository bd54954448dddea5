//! Seeded media damage against every engine (`conformance::corrupt`): each damaged copy of a
//! pool is refused with a typed error, or opens with its data intact (also after more
//! operations), or — damage to the newest record of a log in a crashed pool — is read as the
//! torn tail it is indistinguishable from; the deep check agrees with the open every time.
//! Nothing panics or hangs. CI runs a fixed seed and a bounded number of copies.

use conformance::corrupt::{CorruptConfig, CorruptReport, Verdict, campaign};
use conformance::{Factory, MvccFactory, RedoFactory, UndoFactory};
use tx::LogMode;
use workloads::Params;
use workloads::hash::silo_hash;

fn config(seed: u64) -> CorruptConfig {
    CorruptConfig {
        seed,
        pool_size: 2 << 20,
        ops: 40,
        more_ops: 20,
        flips: 120,
        edits: 45,
        truncations: 8,
    }
}

fn params() -> Params {
    Params {
        keys: 64,
        value_size: 24,
        update_percent: 80,
        threads: 1,
        seed: 23,
        locks_at_one_thread: false,
    }
}

fn run<F: Factory>(factory: &F, seed: u64) -> CorruptReport {
    let report = campaign(factory, &silo_hash(params()), &config(seed))
        .unwrap_or_else(|e| panic!("{}: {e}", factory.name()));
    eprintln!("{report}");
    report
}

fn assert_sound(report: &CorruptReport) {
    assert!(
        report.variants() >= 300,
        "{}: only {} damaged copies",
        report.name,
        report.variants()
    );
    assert!(report.failures.is_empty(), "{report}");
    assert!(report.count(Verdict::Refused) > 0, "{report}");
    assert!(report.count(Verdict::Intact) > 0, "{report}");
}

#[test]
fn redo_refuses_damage_or_opens_intact() {
    assert_sound(&run(&RedoFactory::small(LogMode::Auto), 0x5eed_0001));
}

#[test]
fn undo_refuses_damage_or_opens_intact() {
    assert_sound(&run(&UndoFactory::small(LogMode::Auto), 0x5eed_0002));
}

#[test]
fn mvcc_refuses_damage_or_opens_intact() {
    let hash = silo_hash(params());
    assert_sound(&run(&MvccFactory::small(hash.ops()), 0x5eed_0003));
}
