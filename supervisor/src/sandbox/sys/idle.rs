//! Giving back what start-up touched, before a process only waits.
//!
//! The host side of `sandbox run` and the sandbox's pid 1 spend a
//! sandbox's whole life waiting (for the init, for the worker and relay
//! connections), yet each keeps resident every page of the binary that
//! parsing the profile and building the sandbox ran through: most of their
//! idle memory. [`shed`] drops this process's mappings of the binary's
//! read-only segments (code and constants: their pages are the file's,
//! never written, so a later use reads them back from the page cache), and
//! returns the allocator's free memory to the kernel. Nothing that holds
//! state is dropped: a writable segment, or a read-only one that
//! relocation wrote (RELRO lies in a writable `PT_LOAD`), is left alone, and
//! a binary with text relocations gives nothing back. A debugger's or
//! uprobe's breakpoints set before the shed (private copies of code pages)
//! are dropped with them.

/// Page-aligned `[start, end)` ranges of the main program's segments that
/// are mapped read-only (`PF_R`, or `PF_R | PF_X`): never written.
fn read_only_segments() -> Vec<(usize, usize)> {
    struct Found {
        ranges: Vec<(usize, usize)>,
        page: usize,
        /// Text relocations wrote into a read-only segment: give nothing back.
        textrel: bool,
    }
    /// `Elf64_Dyn`.
    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }
    const DT_NULL: i64 = 0;
    const DT_TEXTREL: i64 = 22;
    const DT_FLAGS: i64 = 30;
    const DF_TEXTREL: u64 = 0x4;
    extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `&mut Found` passed to `dl_iterate_phdr`
        // below, alive for the whole call; `info` is the loader's, valid
        // during this callback, and its `dlpi_phdr` points at `dlpi_phnum`
        // program headers.
        let (found, info) = unsafe { (&mut *data.cast::<Found>(), &*info) };
        let headers = if info.dlpi_phdr.is_null() {
            &[][..]
        } else {
            // SAFETY: as above: `dlpi_phnum` headers at `dlpi_phdr`.
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
        };
        for h in headers.iter().filter(|h| h.p_type == libc::PT_DYNAMIC) {
            let mut at = (info.dlpi_addr as usize).wrapping_add(h.p_vaddr as usize) as *const Dyn;
            // SAFETY: PT_DYNAMIC is mapped for the loader, an array of
            // entries that ends with DT_NULL; read in place, never written.
            while let Some(d) = unsafe { at.as_ref() } {
                match d.tag {
                    DT_NULL => break,
                    DT_TEXTREL => found.textrel = true,
                    DT_FLAGS if d.val & DF_TEXTREL != 0 => found.textrel = true,
                    _ => {}
                }
                // SAFETY: the next entry of the same array (DT_NULL ends it).
                at = unsafe { at.add(1) };
            }
        }
        for h in headers {
            let writable = h.p_flags & libc::PF_W != 0;
            if h.p_type != libc::PT_LOAD || writable || h.p_flags & libc::PF_R == 0 {
                continue;
            }
            let Ok(vaddr) = usize::try_from(h.p_vaddr) else {
                continue;
            };
            let Ok(len) = usize::try_from(h.p_memsz) else {
                continue;
            };
            let start = (info.dlpi_addr as usize).wrapping_add(vaddr);
            // Whole pages only: a partial one may be shared with a neighbour.
            let first = start.div_ceil(found.page) * found.page;
            let end = (start + len) / found.page * found.page;
            if first < end {
                found.ranges.push((first, end));
            }
        }
        // The first object is the program itself; the rest are not ours.
        1
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let mut found = Found {
        ranges: Vec::new(),
        page: page.max(1),
        textrel: false,
    };
    // SAFETY: `visit` matches the callback type and only reads what the
    // loader hands it; `found` outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), (&mut found as *mut Found).cast()) };
    if found.textrel {
        return Vec::new();
    }
    found.ranges
}

/// Drops this process's resident pages of the binary's read-only segments
/// and trims the allocator; returns the bytes of the ranges given back.
/// Best effort: a range the kernel refuses is kept.
pub(crate) fn shed() -> usize {
    let mut shed = 0;
    for (start, end) in read_only_segments() {
        // SAFETY: the range is whole pages of a read-only mapping of the
        // program file that nothing writes: MADV_DONTNEED only unmaps the
        // pages, and the next access faults in the file's same bytes.
        let done =
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        if done == 0 {
            shed += end - start;
        }
    }
    // SAFETY: malloc_trim has no preconditions; it only releases free memory.
    unsafe { libc::malloc_trim(0) };
    shed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resident file-backed memory of this process, in KiB.
    fn rss_file_kib() -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("RssFile:"))
            .map(|v| v.trim().trim_end_matches(" kB").trim().parse().unwrap())
            .unwrap()
    }

    #[test]
    fn the_read_only_segments_are_found_and_given_back_and_the_code_still_runs() {
        let ranges = read_only_segments();
        assert!(!ranges.is_empty(), "no read-only segment found");
        // The code running now is in one of them.
        let here = the_read_only_segments_are_found_and_given_back_and_the_code_still_runs
            as *const () as usize;
        assert!(
            ranges.iter().any(|(s, e)| (*s..*e).contains(&here)),
            "{ranges:x?}"
        );
        let before = rss_file_kib();
        let given = shed();
        let after = rss_file_kib();
        assert!(given > 0);
        assert!(
            after < before,
            "resident file pages {before} KiB, after shedding {after} KiB"
        );
        // Code and constants fault back in, unchanged.
        let text = format!("{:?}", (1u8..=5).map(|n| n * 3).collect::<Vec<_>>());
        assert_eq!(text, "[3, 6, 9, 12, 15]");
    }
}
