//! Seeded randomness for the whole simulated process.
//!
//! The brokers draw randomness the simulator does not hand them: `std`'s `HashMap`s take their
//! hash keys from the operating system (so their iteration order differs from process to
//! process), and UUIDs (incarnation ids, member ids) come from `getrandom`. Either makes a
//! replayed seed take another path. A simulation binary therefore defines the C library's
//! `getrandom` and `getentropy` itself ([`deterministic_entropy!`]): `std` links to that
//! definition, and the `getrandom` crate finds it through `dlsym` because the build exports it
//! (`build.rs`). The bytes come from a per-thread SplitMix64 stream: a simulation thread seeds
//! its own from the run's seed ([`seed_this_thread`]); any other thread starts from a fixed
//! state, so a fresh thread (the brokers' file-work threads) always draws the same bytes.
//!
//! `std` keeps a thread's `HashMap` keys for the thread's life, so each seed runs on a thread of
//! its own (`run_seed`): two runs of one seed, in one process or two, hash alike.

use std::cell::Cell;

/// The stream of a thread nobody seeded.
const UNSEEDED: u64 = 0x6772_6567_6f72_2d73; // "gregor-s"

thread_local! {
    static STATE: Cell<u64> = const { Cell::new(UNSEEDED) };
}

/// Seeds this thread's stream: every byte of randomness this thread draws from now on follows
/// from `seed`.
pub fn seed_this_thread(seed: u64) {
    STATE.with(|s| s.set(seed ^ UNSEEDED));
}

/// Fills `buf` from this thread's stream.
pub fn fill(buf: &mut [u8]) {
    STATE.with(|s| {
        for chunk in buf.chunks_mut(8) {
            let mut x = s.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
            s.set(x);
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^= x >> 31;
            chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
        }
    });
}

/// Defines `getrandom` and `getentropy` in the calling crate (a simulation binary or test),
/// drawing from [`fill`]. Only for executables that run simulations: every random byte of the
/// process becomes predictable.
#[macro_export]
macro_rules! deterministic_entropy {
    () => {
        /// The C library's `getrandom(2)` wrapper, replaced by the simulation's seeded stream.
        ///
        /// # Safety
        /// As for the C function: `buf` is valid for writes of `len` bytes.
        #[no_mangle]
        pub unsafe extern "C" fn getrandom(buf: *mut u8, len: usize, _flags: u32) -> isize {
            if len > 0 {
                // SAFETY: the caller passes a buffer valid for `len` bytes (getrandom's contract).
                $crate::entropy::fill(unsafe { std::slice::from_raw_parts_mut(buf, len) });
            }
            len as isize
        }

        /// The C library's `getentropy(3)`, replaced by the simulation's seeded stream.
        ///
        /// # Safety
        /// As for the C function: `buf` is valid for writes of `len` bytes.
        #[no_mangle]
        pub unsafe extern "C" fn getentropy(buf: *mut u8, len: usize) -> i32 {
            if len > 0 {
                // SAFETY: the caller passes a buffer valid for `len` bytes (getentropy's contract).
                $crate::entropy::fill(unsafe { std::slice::from_raw_parts_mut(buf, len) });
            }
            0
        }
    };
}
