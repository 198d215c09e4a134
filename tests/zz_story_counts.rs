//! Runs last in `cargo test` (test binaries run in name order): prints how many stories ran on
//! each database in this run, so a PostgreSQL half that silently skipped is visible. Under
//! `CI=true`, zero PostgreSQL stories fails the run.

#[test]
fn stories_ran_on_both_databases() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("story-counts");
    // SAFETY: getppid(2) has no preconditions.
    let cargo = unsafe { libc::getppid() };
    let file = dir.join(cargo.to_string());
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    let count = |db: &str| text.lines().filter(|l| *l == db).count();
    let (sqlite, postgres) = (count("sqlite"), count("postgres"));
    // Straight to stderr: the test harness captures `eprintln!` of passing tests.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "stories run: {sqlite} on SQLite, {postgres} on PostgreSQL"
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") && sqlite > 0 {
        assert!(postgres > 0, "CI=true but no story ran on PostgreSQL");
    }
}
