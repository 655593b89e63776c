//! Record batch validation and log recovery never panic, and a log that accepted an append
//! reads back what it stored.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gregor_log::records::decode_batch(data);
    let Ok(dir) = tempfile::tempdir() else { return };
    let Ok(log) = gregor_log::Log::open(dir.path(), gregor_log::LogConfig::default(), 0) else { return };
    if let Ok(info) = log.append_as_leader(data, 0, 0) {
        let read = log.read(info.first_offset, 1 << 20, None).expect("an accepted append reads back");
        assert!(!read.records.is_empty());
    }
    drop(log);
    // Recovery of whatever was written, plus the raw bytes as a garbage tail.
    let _ = std::fs::write(dir.path().join("00000000000000000000.log"), data);
    let _ = gregor_log::Log::open(dir.path(), gregor_log::LogConfig::default(), 0);
});
