//! Prints the log-writer study as a table (`cargo run --release -p bench --example logstudy`).
fn main() {
    let settings = bench::logstudy::StudySettings::default();
    let results = bench::logstudy::run(std::path::Path::new("/dev/shm"), &settings, &|_, _| {})
        .expect("study");
    for batch in bench::logstudy::BATCHES {
        println!("batch {batch}");
        for record in bench::logstudy::RECORD_SIZES {
            let cells: Vec<String> = bench::logstudy::MODES
                .iter()
                .map(|&m| {
                    format!(
                        "{:>8.1}",
                        results
                            .point(m, record, batch)
                            .expect("point")
                            .ns_per_update
                            .median
                    )
                })
                .collect();
            println!(
                "{record:>4} B {}  best {:?}",
                cells.join(" "),
                results.winner(record, batch).map(|p| p.mode)
            );
        }
    }
}
