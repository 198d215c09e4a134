// `sqlx::migrate!` embeds migrations/ at compile time; without this a new migration file does not
// rebuild the crate (as `sqlx migrate build-script` writes it).
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
