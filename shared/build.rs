//! sqlx's `migrate!` embeds the migrations when this crate compiles, and on stable Rust it
//! cannot ask cargo to compile again when one is added: without this, a build after a new
//! migration kept the old list, and its services waited for a migration nobody applied.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
