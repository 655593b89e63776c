//! Runs the log benchmark without the `gregor` CLI:
//! `cargo run --release -p gregor-log --example bench_log -- DIR [SECONDS]`
//! prints one JSON object per line and case, like `gregor bench log --dir DIR --json`.

use gregor_log::bench::{run, BenchOptions};

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| ".".to_string());
    let mut opts = BenchOptions::new(dir);
    if let Some(s) = args.next() {
        match s.parse() {
            Ok(secs) => opts.seconds = secs,
            Err(_) => {
                eprintln!("SECONDS must be a number, got {s:?}");
                std::process::exit(2);
            }
        }
    }
    match run(&opts) {
        Ok(cases) => {
            for c in cases {
                match serde_json::to_string(&c) {
                    Ok(line) => println!("{line}"),
                    Err(e) => {
                        eprintln!("cannot encode result: {e}");
                        std::process::exit(1);
                    }
                }
            }
        }
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}
