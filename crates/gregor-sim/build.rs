// The `getrandom` crate looks the C library's `getrandom` up with `dlsym`, which sees an
// executable's own definition (`gregor_sim::deterministic_entropy!`) only if the executable
// exports it.
fn main() {
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=getrandom");
    println!("cargo:rustc-link-arg-tests=-Wl,--export-dynamic-symbol=getrandom");
}
