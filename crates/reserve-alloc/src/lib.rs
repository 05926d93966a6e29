//! The allocator of kafka-mirror-proxy: the system's, except that an allocation of 1 GiB or more
//! is reserved with `mmap(MAP_NORESERVE)` instead of being asked of `malloc`.
//!
//! Why: `kafka-protocol` (0.18) sizes a decoded array's `Vec` from the count the bytes claim, before
//! it reads a single entry. Nine bytes of a Metadata response claiming 4 billion brokers ask for
//! 400 GB up front. `malloc` passes that to the kernel, whose default overcommit heuristic refuses
//! a request larger than RAM plus swap, and a refused allocation aborts the whole process (Rust's
//! `handle_alloc_error`), every connection with it, instead of failing that one decode. A
//! `MAP_NORESERVE` mapping is not counted against the commit limit (under `vm.overcommit_memory`
//! 0 or 1), so the reservation succeeds without taking memory: pages are only used when written,
//! the decode fails at the next missing entry, and the mapping is unmapped when the `Vec` is
//! dropped. Under `vm.overcommit_memory = 2` the kernel refuses it as before.
//!
//! Why not another allocator: mimalloc, for one, also reserves with `MAP_NORESERVE` where the
//! kernel overcommits, and a mimalloc build measured the same throughput and CPU as the system's
//! (BENCHMARKS.md, "The allocator"). But it serves every allocation its own way, which this fix
//! does not need, and reserving that way is its internal choice, not a promise. Here everything
//! below 1 GiB, which is every allocation real traffic makes, stays exactly as the system
//! allocator does it, and the one behaviour needed is written down and tested.
//!
//! Must not touch: anything below [`LARGE`], and any alignment above a page (both go to
//! [`System`] unchanged). Not on Linux: [`System`] for everything.

use std::alloc::{GlobalAlloc, Layout, System};

/// Allocations of at least this many bytes are reserved with `MAP_NORESERVE`.
pub const LARGE: usize = 1 << 30;

/// The system allocator, with allocations of [`LARGE`] bytes or more reserved without being
/// committed. Declare it with `#[global_allocator]`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReserveLarge;

/// Whether `layout` goes to `mmap`: large, and aligned to no more than a page (4 KiB or more on
/// every Linux target; `mmap` returns page-aligned memory).
fn is_large(layout: Layout) -> bool {
    cfg!(target_os = "linux") && layout.size() >= LARGE && layout.align() <= 4096
}

#[cfg(target_os = "linux")]
fn reserve(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
    // existing memory; failure is reported as MAP_FAILED and turned into null.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE, -1, 0)
    };
    if p == libc::MAP_FAILED { std::ptr::null_mut() } else { p.cast() }
}

#[cfg(target_os = "linux")]
fn release(ptr: *mut u8, size: usize) {
    // SAFETY: `ptr` and `size` are those of a mapping made by `reserve` (the caller's layout is
    // the one it was allocated with), which nothing uses any more.
    // A failing munmap would leave the mapping in place; there is nothing better to do with it.
    let _ = unsafe { libc::munmap(ptr.cast(), size) };
}

#[cfg(not(target_os = "linux"))]
fn reserve(_size: usize) -> *mut u8 {
    unreachable!("is_large is false off Linux")
}

#[cfg(not(target_os = "linux"))]
fn release(_ptr: *mut u8, _size: usize) {
    unreachable!("is_large is false off Linux")
}

// SAFETY: every block is allocated and freed by the same side (`mmap` for large layouts, `System`
// for the rest), decided by the layout, which the caller passes back unchanged; `mmap` returns
// zeroed, page-aligned memory of at least the requested size.
unsafe impl GlobalAlloc for ReserveLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract (non-zero size) is passed on unchanged.
        if is_large(layout) { reserve(layout.size()) } else { unsafe { System.alloc(layout) } }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // An anonymous mapping is zeroed by the kernel.
        // SAFETY: as for `alloc`.
        if is_large(layout) { reserve(layout.size()) } else { unsafe { System.alloc_zeroed(layout) } }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if is_large(layout) {
            release(ptr, layout.size());
        } else {
            // SAFETY: `ptr` came from `System` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size`, rounded up to the alignment, does not overflow.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if !is_large(layout) && !is_large(new_layout) {
            // SAFETY: `ptr` came from `System` with `layout`.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // Across the threshold, or between two mappings: a new block, the old contents, the old
        // block freed. (Rare: only a Vec growing past 1 GiB.)
        // SAFETY: `new_layout` has a non-zero size (the caller's contract).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are valid for the smaller of the two sizes and do not overlap
            // (the old one is still allocated); the old one is then freed with its own layout.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOCATOR: ReserveLarge = ReserveLarge;

    /// 400 GB (more than any test machine has in RAM and swap) is reserved, written at its start
    /// and freed, twice. The system allocator refuses it under Linux's default overcommit heuristic
    /// (this test fails with `System` as the global allocator).
    #[test]
    #[cfg(target_os = "linux")]
    fn a_reservation_larger_than_memory_succeeds_and_is_freed() {
        let size = 400usize << 30;
        let mut v: Vec<u8> = Vec::new();
        v.try_reserve_exact(size).expect("reserved without being committed");
        v.push(7);
        v.extend_from_slice(&[1, 2, 3]);
        assert_eq!(&v[..], &[7, 1, 2, 3]);
        assert!(v.capacity() >= size);
        drop(v);
        // And again, as `u64`s, after the first mapping was released.
        let mut w: Vec<u64> = Vec::new();
        w.try_reserve_exact(size / 8).expect("again");
        w.push(1);
        assert_eq!(w[0], 1);
    }

    /// The contents survive a realloc that crosses the threshold, up and down, and zeroed
    /// allocations are zero on both sides of it.
    #[test]
    fn realloc_across_the_threshold_keeps_the_contents() {
        let mut v: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
        v.reserve_exact(LARGE);
        assert!(v.capacity() >= LARGE);
        assert!(v.iter().copied().eq((0..=255u8).cycle().take(1 << 20)));
        v.shrink_to_fit();
        assert!(v.capacity() < LARGE);
        assert!(v.iter().copied().eq((0..=255u8).cycle().take(1 << 20)));
        for size in [64, LARGE] {
            let z = vec![0u8; size];
            assert!(z.len() == size && z.iter().take(4096).chain(z.iter().rev().take(4096)).all(|&b| b == 0));
        }
    }

    /// Alignments above a page go to the system allocator even when large.
    #[test]
    fn large_alignment_is_left_to_the_system() {
        let layout = Layout::from_size_align(LARGE, 1 << 16).expect("layout");
        assert!(!is_large(layout));
        assert!(is_large(Layout::from_size_align(LARGE, 8).expect("layout")) == cfg!(target_os = "linux"));
        assert!(!is_large(Layout::from_size_align(LARGE - 1, 8).expect("layout")));
    }
}
