//! `sqlx::migrate!` embeds `migrations/` when the crate compiles, and cargo does not watch that
//! directory by itself: without this, a migration added or edited is missing from the next build.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
