package sandbox

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// A write set is the pages of a template that a fresh child's agent writes
// on its way to hello: each is a copy-on-write fault in the child (3 us
// apiece on this kind of machine, about a third of a fresh agent's start).
// The host takes it from the kernel once per template, from its first
// child's agent just after hello (before that sandbox runs any code it is
// sent, so no code of a user's shapes it), and sends it to the template
// (zfork.c's store_ws); each spare the template clones writes those pages
// ahead while it waits for its request, so that its agent finds them its
// own. Only addresses go to the template, never what a child's memory
// holds. (Taking it after a first exec of forge's own, an empty cell, made
// it a third larger and the start no faster.)
const (
	maxWriteSetRanges = 512 // zfork.c's WS_MAX_RANGES
	// maxWriteSetPages is at most zfork.c's WS_MAX_PAGES (4096), and so
	// small that a spare's pages written ahead, charged to its template's
	// cgroup, fit ZygoteChildCharge beside the clone's kernel objects
	// (measured: 320-500 pages, and 0.3-0.7 MiB of kernel memory).
	maxWriteSetPages = 768
	maxScannedPages  = 1 << 18
)

type pageRange struct {
	start uint64
	pages uint32
}

// span is an address range [start, end).
type span struct{ start, end uint64 }

// privateWritable are pid's private writable mappings (/proc/<pid>/maps).
func privateWritable(pid int) ([]span, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	var out []span
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || len(f[1]) != 4 || f[1][1] != 'w' || f[1][3] != 'p' {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if ok && err1 == nil && err2 == nil && start < end {
			out = append(out, span{start, end})
		}
	}
	return out, sc.Err()
}

// writeSet reads from the kernel which pages of the template's private
// writable mappings (tpl) the agent (pid) has a copy of its own of
// (present, mapped by the agent alone, not the file's page), as ranges, at
// most maxWriteSetRanges of them and maxWriteSetPages in all (what is past
// that is left out). Pages of the agent's own mappings (a thread's stack)
// are not the template's to write ahead.
func writeSet(pid int, tpl []span) ([]pageRange, error) {
	mine, err := privateWritable(pid)
	if err != nil {
		return nil, err
	}
	pm, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, err
	}
	defer pm.Close()
	const (
		present   = 1 << 63
		filePage  = 1 << 61
		exclusive = 1 << 56
	)
	var out []pageRange
	total := 0
	for _, m := range mine {
		for _, t := range tpl {
			start, end := max(m.start, t.start), min(m.end, t.end)
			if start >= end || (end-start)/4096 > maxScannedPages {
				continue
			}
			buf := make([]byte, (end-start)/4096*8)
			if _, err := pm.ReadAt(buf, int64(start/4096*8)); err != nil {
				continue // the mapping went away
			}
			for i := 0; i+8 <= len(buf); i += 8 {
				if binary.LittleEndian.Uint64(buf[i:])&(present|exclusive|filePage) != present|exclusive {
					continue
				}
				addr := start + uint64(i/8)*4096
				if n := len(out); n > 0 && out[n-1].start+uint64(out[n-1].pages)*4096 == addr {
					out[n-1].pages++
				} else if n < maxWriteSetRanges {
					out = append(out, pageRange{start: addr, pages: 1})
				} else {
					continue
				}
				if total++; total == maxWriteSetPages {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// writeSetMessage is ws as the template's 'W' message (zfork.c, store_ws).
func writeSetMessage(ws []pageRange) []byte {
	msg := append(make([]byte, 0, 8+12*len(ws)), 'W', 0, 0, 0)
	msg = binary.LittleEndian.AppendUint32(msg, uint32(len(ws)))
	for _, r := range ws {
		msg = binary.LittleEndian.AppendUint64(msg, r.start)
		msg = binary.LittleEndian.AppendUint32(msg, r.pages)
	}
	return msg
}

// sendWriteSet sends the template the write set of the agent whose pid 1
// (the reaper) is p1 in forge's pid namespace: the reaper's one child.
func (t *template) sendWriteSet(p1 int) {
	kids, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", p1, p1))
	f := strings.Fields(string(kids))
	if err != nil || len(f) != 1 {
		t.rt.log.Debug("zygote template: no write set (the agent not found)", "template", t.id, "children", f, "err", err)
		return
	}
	agent, _ := strconv.Atoi(f[0])
	tp, err := t.proc.Pid()
	var tpl []span
	if err == nil {
		tpl, err = privateWritable(tp)
	}
	if err != nil {
		t.rt.log.Debug("zygote template: no write set (its maps)", "template", t.id, "err", err)
		return
	}
	ws, err := writeSet(agent, tpl)
	if err != nil || len(ws) == 0 {
		t.rt.log.Debug("zygote template: no write set", "template", t.id, "err", err)
		return
	}
	pages := 0
	for _, r := range ws {
		pages += int(r.pages)
	}
	t.forkMu.Lock()
	defer t.forkMu.Unlock()
	if !t.alive() {
		return
	}
	if err := sendFds(t.ctl, writeSetMessage(ws), nil); err != nil {
		return // the template is gone: its next request finds out
	}
	t.rt.zstat(func(z *ZygoteStats) { z.WriteSets++; z.WriteSetPages = pages })
	t.rt.log.Debug("zygote template: write set sent", "template", t.id, "ranges", len(ws), "pages", pages)
}
