//! `ferrite sim trace`: generates a workload's per-core trace with `tracegen` and writes it in
//! the trace format (`docs/trace-format.md`), for `ferrite sim run --trace`.

use super::{TraceArgs, generate, trace_spec};
use crate::size::format_bytes;
use anyhow::Context;
use std::io::Write;

/// Runs `sim trace`.
pub fn run(args: &TraceArgs, out: &mut dyn Write) -> anyhow::Result<()> {
    crate::output::file_can_be_written(&args.out)?;
    let spec = trace_spec(args.workload, args.cores, &args.shape);
    let trace = generate(&spec)?;
    let bytes = trace.to_bytes();
    crate::output::replace_file(&args.out, &bytes)
        .with_context(|| format!("writing the trace to {}", args.out.display()))?;
    writeln!(
        out,
        "wrote {}: {} on {}, {} transactions per core, {} keys, seed {}; {} events, {}",
        args.out.display(),
        spec.workload,
        crate::eval::silo::cores_text(trace.cores()),
        spec.transactions,
        spec.keys,
        spec.seed,
        trace.total_events(),
        format_bytes(bytes.len() as u64)
    )?;
    Ok(())
}
