//! Prints the downlink multiplexing capacity bound (docs/results.md):
//! `cargo run -p airpack-lab --example downlink_bound`.
fn main() {
    print!("{}", airpack_lab::downlink_bound::table_text());
}
