//! One run, JSON metrics: `one DESIGN KIND CORES TX ELEMENTS`.
use hwsim::synth::{SynthKind, SynthSpec, synth_trace};
use hwsim::{Config, DesignKind, simulate};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let design = DesignKind::from_name(&a[0]).expect("design");
    let kind = if a[1] == "hash" {
        SynthKind::HashUpdate
    } else {
        SynthKind::ArraySwap
    };
    let cores: usize = a[2].parse().unwrap();
    let spec = SynthSpec {
        kind,
        cores,
        tx_per_core: a[3].parse().unwrap(),
        elements: a[4].parse().unwrap(),
        compute: 200,
        seed: 42,
    };
    let trace = synth_trace(&spec);
    let m = simulate(&Config::default().with_cores(cores), design, &trace).unwrap();
    let mut v = serde_json::to_value(&m).unwrap();
    v.as_object_mut().unwrap().remove("per_core");
    println!("{}", serde_json::to_string_pretty(&v).unwrap());
}
