//! No recursion in the firmware: the direct call graph of a linked ELF (`bl` calls and tail
//! branches to another function's first instruction, read from `llvm-objdump -d`), searched
//! for cycles. A stack bound holds only without recursion; indirect calls (`blx rN`: trait
//! objects, function pointers) are not in the graph, and the boards' measured stack figures cover
//! them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `llvm-objdump` to use: on `PATH`, else the rustup `llvm-tools` component's.
fn objdump() -> Result<PathBuf, String> {
    if Command::new("llvm-objdump")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok("llvm-objdump".into());
    }
    let sysroot = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustc --print sysroot: {e}"))?;
    let sysroot = String::from_utf8_lossy(&sysroot.stdout).trim().to_string();
    let host = Command::new("rustc")
        .arg("-vV")
        .output()
        .map_err(|e| format!("rustc -vV: {e}"))?;
    let host = String::from_utf8_lossy(&host.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .unwrap_or_default();
    let tool = Path::new(&sysroot).join(format!("lib/rustlib/{host}/bin/llvm-objdump"));
    if tool.is_file() {
        Ok(tool)
    } else {
        Err("llvm-objdump not found: rustup component add llvm-tools".into())
    }
}

/// Cycles of a call graph, each as its functions' names.
pub type Cycles = Vec<Vec<String>>;

/// A function's name and the functions it calls directly (indices).
#[derive(Debug, Default)]
struct Graph {
    names: Vec<String>,
    calls: Vec<Vec<usize>>,
}

/// The call graph of a disassembly (`llvm-objdump -d -C --no-show-raw-insn`).
fn parse(listing: &str) -> Graph {
    let mut g = Graph::default();
    let mut starts: HashMap<u64, usize> = HashMap::new();
    // First pass: function starts (mapping symbols `$d`, `$t` are not functions).
    for line in listing.lines() {
        if let Some((addr, name)) = header(line) {
            if !name.starts_with('$') {
                starts.insert(addr, g.names.len());
                g.names.push(name.to_string());
            }
        }
    }
    g.calls = vec![Vec::new(); g.names.len()];
    let mut current = None;
    for line in listing.lines() {
        if let Some((addr, name)) = header(line) {
            if !name.starts_with('$') {
                current = starts.get(&addr).copied();
            }
            continue;
        }
        let (Some(f), Some((op, target))) = (current, branch(line)) else {
            continue;
        };
        let Some(&t) = starts.get(&target) else {
            continue;
        };
        // A branch to the function's own start is a loop; a call to it is recursion.
        if (t != f || op == "bl") && !g.calls[f].contains(&t) {
            g.calls[f].push(t);
        }
    }
    g
}

/// `(address, name)` of a symbol line `0000abcd <name>:`.
fn header(line: &str) -> Option<(u64, &str)> {
    let (addr, rest) = line.split_once(" <")?;
    let name = rest.strip_suffix(">:")?;
    Some((u64::from_str_radix(addr.trim(), 16).ok()?, name))
}

/// `(mnemonic, target)` of a direct branch or call: `bl`, `b`, `b.w`, `b<cc>`, `b<cc>.w`.
fn branch(line: &str) -> Option<(&str, u64)> {
    let mut fields = line.split_whitespace();
    fields.next()?.strip_suffix(':')?;
    let op = fields.next()?;
    let base = op.strip_suffix(".w").unwrap_or(op);
    let is_branch = base == "bl"
        || base == "b"
        || (base.len() == 3
            && base.starts_with('b')
            && [
                "eq", "ne", "cs", "cc", "hs", "lo", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt",
                "gt", "le",
            ]
            .contains(&&base[1..]));
    if !is_branch {
        return None;
    }
    let target = fields.next()?.strip_prefix("0x")?;
    Some((base, u64::from_str_radix(target, 16).ok()?))
}

/// The cycles of `g` (Tarjan's strongly connected components of more than one function, or one
/// that calls itself), each as its functions' names.
fn cycles(g: &Graph) -> Cycles {
    let n = g.names.len();
    let (mut index, mut low) = (vec![usize::MAX; n], vec![0usize; n]);
    let (mut on_stack, mut stack, mut next, mut out) = (vec![false; n], Vec::new(), 0, Vec::new());
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // Iterative DFS: (node, next edge to follow).
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if *edge == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = g.calls[v].get(*edge) {
                *edge += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut scc = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 || g.calls[v].contains(&v) {
                    out.push(scc.iter().map(|&i| g.names[i].clone()).collect());
                }
            }
        }
    }
    out
}

/// The cycles of the direct call graph of `elf` that involve a function whose name contains
/// one of `crates` (e.g. `edgekv`), and the other cycles (in dependencies), each as its
/// functions' names.
pub fn recursion(elf: &Path, crates: &[&str]) -> Result<(Cycles, Cycles), String> {
    let out = Command::new(objdump()?)
        .args(["-d", "-C", "--no-show-raw-insn"])
        .arg(elf)
        .output()
        .map_err(|e| format!("llvm-objdump {}: {e}", elf.display()))?;
    if !out.status.success() {
        return Err(format!(
            "llvm-objdump {} failed ({})",
            elf.display(),
            out.status
        ));
    }
    let graph = parse(&String::from_utf8_lossy(&out.stdout));
    let (ours, others): (Vec<_>, Vec<_>) = cycles(&graph)
        .into_iter()
        .partition(|c| c.iter().any(|f| crates.iter().any(|k| f.contains(k))));
    Ok((ours, others))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
00000400 <a>:
     400:      \tbl\t0x500 <b> @ imm = #1
     404:      \tb\t0x400 <a>
00000500 <b>:
     500:      \tbeq.w\t0x600 <c>
     504:      \tbl\t0x504 <b+0x4>
00000540 <$d>:
00000600 <c>:
     600:      \tbl\t0x500 <b>
     604:      \tblx\tr3
00000700 <d>:
     700:      \tbl\t0x700 <d>
00000800 <e>:
     800:      \tbl\t0x400 <a>
";

    #[test]
    fn finds_mutual_and_self_recursion_and_nothing_else() {
        let g = parse(LISTING);
        assert_eq!(g.names, ["a", "b", "c", "d", "e"]);
        let mut found = cycles(&g);
        for c in &mut found {
            c.sort();
        }
        found.sort();
        assert_eq!(
            found,
            vec![vec!["b".to_string(), "c".into()], vec!["d".into()]]
        );
    }
}
