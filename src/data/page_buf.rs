//! Page-aligned byte buffers for what the stream threads hand the kernel to copy.
//!
//! The kernel copies between socket buffers and user memory with `rep movsb`, which on
//! common x86 cores runs far below its speed when the user buffer is a few bytes off a
//! 32-byte boundary — and a large `Vec` from malloc starts 16 bytes into its mapping. The
//! yardstick's buffers are page-aligned (`posix_memalign`), so every data-path buffer here
//! is too: the aligned part of a slightly larger `Vec` (no unsafe code, no allocator).

use std::ops::{Deref, DerefMut};

/// The alignment of every [`PageBuf`]: a page.
pub const ALIGN: usize = 4096;

/// A byte buffer starting on a page boundary, of a length that may change up to the one it
/// was made with (a short last block of `-F`).
/// Not `Clone`: a copied `Vec` would lie elsewhere, its aligned start with it.
#[derive(Debug)]
pub struct PageBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
    capacity: usize,
}

impl PageBuf {
    /// `len` bytes of `fill`, page-aligned.
    pub fn filled(len: usize, fill: u8) -> PageBuf {
        PageBuf::aligned(vec![fill; len + ALIGN], len)
    }

    /// `len` zero bytes, page-aligned, every page already in memory: for a buffer whose
    /// first use must not wait on page faults (a UDP receiver's 2 MiB of slots, read while
    /// datagrams queue up: 512 faults, milliseconds). `vec![0; n]` takes `calloc`'s fresh
    /// pages untouched; these zeros are written out, and hidden from the compiler, which
    /// would make them `calloc` again.
    pub fn resident(len: usize) -> PageBuf {
        let mut raw = Vec::with_capacity(len + ALIGN);
        raw.resize(len + ALIGN, std::hint::black_box(0));
        PageBuf::aligned(raw, len)
    }

    /// The page-aligned `len` bytes of `raw` (at least `len + ALIGN` long).
    fn aligned(raw: Vec<u8>, len: usize) -> PageBuf {
        let start = raw.as_ptr().align_offset(ALIGN).min(ALIGN);
        PageBuf {
            raw,
            start,
            len,
            capacity: len,
        }
    }

    /// `len` zero bytes, page-aligned.
    pub fn zeroed(len: usize) -> PageBuf {
        PageBuf::filled(len, 0)
    }

    /// Sets the length to `len` (at most what the buffer was made with); bytes past the old
    /// length keep what they held.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity);
    }
}

impl Deref for PageBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
}

impl DerefMut for PageBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_buffer_starts_on_a_page_and_holds_its_fill() {
        for len in [1, 100, 8192, 128 << 10, (1 << 20) + 3] {
            let b = PageBuf::filled(len, 0x5a);
            assert_eq!(b.as_ptr() as usize % ALIGN, 0, "{len} bytes");
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0x5a));
        }
        // A zero-length buffer is a valid empty slice.
        assert!(PageBuf::zeroed(0).is_empty());
    }

    #[test]
    fn a_resident_buffer_is_in_memory_before_its_first_use() {
        // Past glibc's largest mmap threshold (32 MiB): fresh pages, as a zeroed one gets.
        let len = 64 << 20;
        let absent = crate::os::sys::pages_not_resident(&PageBuf::resident(len)).expect("mincore");
        assert_eq!(absent, 0, "{absent} pages of {len} bytes not yet in memory");
        let lazy = crate::os::sys::pages_not_resident(&PageBuf::zeroed(len)).expect("mincore");
        assert!(
            lazy > 0,
            "a zeroed buffer was all in memory: the test shows nothing here"
        );
    }

    #[test]
    fn the_length_moves_within_what_it_was_made_with() {
        let mut b = PageBuf::zeroed(10);
        b[9] = 7;
        b.set_len(4);
        assert_eq!(b.len(), 4);
        b.set_len(100);
        assert_eq!(b.len(), 10, "capped at the made length");
        assert_eq!(b[9], 7, "bytes past a shortened length are kept");
    }
}
