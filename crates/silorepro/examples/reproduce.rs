//! Runs the Silo reproduction and prints its tables (markdown).
//!
//! ```text
//! cargo run --release -p silorepro --example reproduce -- [--quick] [--json PATH]
//!     [--transactions N] [--threads N]
//! ```

use silorepro::{ReproSpec, report, reproduce};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut spec = ReproSpec::default();
    let mut json = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--quick" => spec = ReproSpec::quick(),
            "--json" => json = args.next(),
            "--transactions" => spec.transactions = args.next().ok_or("value")?.parse()?,
            "--threads" => spec.threads = args.next().ok_or("value")?.parse()?,
            other => return Err(format!("unknown flag {other}").into()),
        }
    }
    let rep = reproduce(&spec)?;
    print!("{}", report::markdown(&rep));
    if let Some(path) = json {
        std::fs::write(path, serde_json::to_string_pretty(&rep)?)?;
    }
    Ok(())
}
