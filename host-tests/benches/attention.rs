//! Decode attention benchmark (placeholder, being written).
fn main() {}
