//! SQLite's own allocations, made with jemalloc, the allocator the rest of
//! the host uses, instead of the C library's `malloc`.
//!
//! The broker thread opens and closes a savepoint for every job, and SQLite
//! keeps each savepoint's journal in memory chunks it frees again at once.
//! With glibc's `malloc` those frees left the thread's heap with a free top
//! over its trim threshold many times a second, and glibc gave it back to
//! the kernel every time (`madvise`, 20 KiB at a time), which costs a TLB
//! shootdown across every core and the page faults of taking it back. A
//! 40,000-message drain (publish included) made 1,289 such calls and 7,108
//! page faults; with jemalloc, 51 and 3,396. jemalloc keeps freed pages for
//! reuse and returns them on its own schedule.

use std::ffi::{c_int, c_void};
use std::sync::Once;

use rusqlite::ffi;
use tikv_jemalloc_sys as je;

unsafe extern "C" fn x_malloc(n: c_int) -> *mut c_void {
    // SAFETY: jemalloc's malloc takes any size; SQLite never asks for a
    // negative one.
    unsafe { je::malloc(n.max(0) as usize) }
}

unsafe extern "C" fn x_free(p: *mut c_void) {
    // SAFETY: SQLite frees only what `x_malloc` or `x_realloc` returned.
    unsafe { je::free(p) }
}

unsafe extern "C" fn x_realloc(p: *mut c_void, n: c_int) -> *mut c_void {
    // SAFETY: as for `x_free`; SQLite passes a size from `x_roundup`.
    unsafe { je::realloc(p, n.max(0) as usize) }
}

unsafe extern "C" fn x_size(p: *mut c_void) -> c_int {
    // SAFETY: `p` came from `x_malloc` or `x_realloc`. SQLite's allocations
    // are under 2 GiB (its own limit), so the size fits.
    unsafe { je::malloc_usable_size(p) as c_int }
}

unsafe extern "C" fn x_roundup(n: c_int) -> c_int {
    // SAFETY: nallocx only computes the size class; 0 flags.
    let rounded = unsafe { je::nallocx(n.max(1) as usize, 0) };
    c_int::try_from(rounded).unwrap_or(n)
}

unsafe extern "C" fn x_init(_: *mut c_void) -> c_int {
    ffi::SQLITE_OK
}

unsafe extern "C" fn x_shutdown(_: *mut c_void) {}

/// Hand SQLite's allocations to jemalloc and stop its memory statistics,
/// once per process and before the first connection (SQLite takes neither
/// after it has started; if something else in the process started it
/// first, it keeps its own, and this is logged at debug).
pub(super) fn use_jemalloc() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: as below; MEMSTATUS takes an int. Off, SQLite no longer
        // takes a lock and asks each allocation's size at every malloc and
        // free to keep totals that nothing here reads.
        let counted = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as c_int) };
        let methods = ffi::sqlite3_mem_methods {
            xMalloc: Some(x_malloc),
            xFree: Some(x_free),
            xRealloc: Some(x_realloc),
            xSize: Some(x_size),
            xRoundup: Some(x_roundup),
            xInit: Some(x_init),
            xShutdown: Some(x_shutdown),
            pAppData: std::ptr::null_mut(),
        };
        // SAFETY: SQLITE_CONFIG_MALLOC takes a pointer to the methods and
        // copies them; it refuses (SQLITE_MISUSE) once SQLite has started.
        let rc = unsafe {
            ffi::sqlite3_config(
                ffi::SQLITE_CONFIG_MALLOC,
                &methods as *const ffi::sqlite3_mem_methods,
            )
        };
        if counted != ffi::SQLITE_OK || rc != ffi::SQLITE_OK {
            tracing::debug!(
                rc,
                "SQLite had started before the broker: it keeps the C library's malloc"
            );
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_allocates_from_jemalloc() {
        use_jemalloc();
        // SAFETY: a plain allocation, sized and freed by SQLite.
        unsafe {
            let p = ffi::sqlite3_malloc(100);
            assert!(!p.is_null());
            // jemalloc's size class for 100 bytes is 112; glibc's malloc
            // would give 104 usable bytes.
            assert_eq!(ffi::sqlite3_msize(p) as usize, je::nallocx(100, 0));
            assert_eq!(je::nallocx(100, 0), 112);
            ffi::sqlite3_free(p);
        }
    }
}
