//! The crate's layers, checked over its source: every `crate::` path in a
//! top-level module of `src/` (tests excluded) may only name a module of
//! a lower layer or of its own, and no two modules may depend on each
//! other, directly or through others. A new dependency that goes the
//! wrong way fails here with the file that made it.
//!
//! The layers, lowest first. Pure data and settings at the bottom; the
//! telemetry takes typed events from everyone above; the trackers, the
//! desired state and the sources turn objects into data, and a node's
//! view is made of that data; the kernel facilities, the sync state and
//! the API side (which serves views) use them; the backend contract sits
//! between the sync state and what implements it; the daemon runs the
//! loop, and `app` wires each of the binary's modes from its parts.
//! The kernel layer holds no policy (the iptables rules are the
//! proxier's, beside its IPVS plan) and takes from `desired` only the
//! data types it programs: virtual server keys and set entries.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

const LAYERS: &[&[&str]] = &[
    &[
        "model",
        "version",
        "config",
        "runner",
        "endpointslice",
        "oom",
        "runtime_thread",
        "docs_page",
    ],
    &["telemetry", "selection"],
    &["tracker", "desired", "source", "nodeview"],
    &["kernel", "sync", "apiside"],
    &["backend"],
    &["proxier", "server"],
    &["daemon", "logging"],
    &["fuzz", "app"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// `src/<module>.rs` and every file under `src/<module>/`, but tests.
fn files_of(src: &Path, module: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "tests") {
                    walk(&path, out);
                }
            } else if path.extension().is_some_and(|e| e == "rs")
                && path.file_name().is_some_and(|n| n != "tests.rs")
            {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    let single = src.join(format!("{module}.rs"));
    if single.exists() {
        files.push(single);
    }
    walk(&src.join(module), &mut files);
    files
}

/// The code of a file without its comments (doc links name modules
/// without depending on them) and without `#[cfg(test)]` modules written
/// inline (`mod tests { ... }`).
fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut skip_depth: Option<i32> = None;
    let mut depth = 0i32;
    let mut cfg_test = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let line = line.split(" //").next().unwrap_or(line);
        if trimmed.starts_with("#[cfg(test)]") {
            cfg_test = true;
            continue;
        }
        let opens = line.matches('{').count() as i32;
        let closes = line.matches('}').count() as i32;
        if cfg_test && skip_depth.is_none() && opens > closes {
            skip_depth = Some(depth);
        }
        cfg_test = false;
        depth += opens - closes;
        match skip_depth {
            Some(d) if depth <= d => skip_depth = None,
            Some(_) => {}
            None => {
                code.push_str(line);
                code.push('\n');
            }
        }
    }
    code
}

/// Top-level modules a piece of code names through `crate::`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("crate::") {
        let start = from + at + "crate::".len();
        from = start;
        if start > "crate::".len()
            && (bytes[start - "crate::".len() - 1].is_ascii_alphanumeric()
                || bytes[start - "crate::".len() - 1] == b'_')
        {
            continue; // `some_crate::`, not ours
        }
        if bytes.get(start) == Some(&b'{') {
            // `crate::{a, b::c, d::{e, f}}`: the names at depth one.
            let mut depth = 0;
            let mut name = String::new();
            let mut at_item_start = true;
            for &b in &bytes[start..] {
                match b {
                    b'{' => {
                        depth += 1;
                        if depth == 1 {
                            at_item_start = true;
                        }
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => {
                        if !name.is_empty() {
                            refs.insert(std::mem::take(&mut name));
                        }
                        at_item_start = true;
                    }
                    b if depth == 1 && at_item_start => {
                        if b.is_ascii_alphanumeric() || b == b'_' {
                            name.push(b as char);
                        } else if !name.is_empty() {
                            refs.insert(std::mem::take(&mut name));
                            at_item_start = false;
                        }
                    }
                    _ => {}
                }
            }
            if !name.is_empty() {
                refs.insert(name);
            }
        } else {
            let name: String = code[start..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                refs.insert(name);
            }
        }
    }
    refs.retain(|r| r != "self" && r != "super");
    refs
}

fn graph() -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph = BTreeMap::new();
    for module in LAYERS.iter().flat_map(|l| l.iter()) {
        let mut deps = BTreeMap::new();
        for file in files_of(&src, module) {
            let text = fs::read_to_string(&file).expect("a readable file");
            for dep in crate_refs(&code_of(&text)) {
                if dep != *module {
                    deps.entry(dep).or_insert_with(|| file.clone());
                }
            }
        }
        graph.insert(module.to_string(), deps);
    }
    graph
}

#[test]
fn every_module_of_src_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    // From the tree rather than lib.rs, whose declarations a macro makes.
    let mut declared: Vec<String> = fs::read_dir(&src)
        .expect("src/")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_stem()?.to_str()?.to_owned();
            let module = path.is_dir() || path.extension()? == "rs";
            (module && name != "lib" && name != "main").then_some(name)
        })
        .collect();
    declared.sort();
    declared.dedup();
    assert!(!declared.is_empty(), "no module found in src/");
    let missing: Vec<&String> =
        declared.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(missing.is_empty(), "modules without a layer: {missing:?}");
}

#[test]
fn no_module_imports_from_a_higher_layer() {
    let mut wrong = Vec::new();
    for (module, deps) in graph() {
        let own = layer_of(&module).expect("listed");
        for (dep, file) in deps {
            match layer_of(&dep) {
                Some(layer) if layer <= own => {}
                Some(layer) => wrong.push(format!(
                    "{} ({module}, layer {own}) uses {dep} (layer {layer})",
                    file.display()
                )),
                None => wrong.push(format!(
                    "{} uses crate::{dep}, which has no layer",
                    file.display()
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn no_two_modules_depend_on_each_other() {
    let graph = graph();
    // Depth-first search from each module; a path back to it is a cycle.
    fn reaches(
        graph: &BTreeMap<String, BTreeMap<String, PathBuf>>,
        from: &str,
        target: &str,
        seen: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> bool {
        for dep in graph.get(from).into_iter().flat_map(|d| d.keys()) {
            if dep == target {
                path.push(dep.clone());
                return true;
            }
            if seen.insert(dep.clone()) {
                path.push(dep.clone());
                if reaches(graph, dep, target, seen, path) {
                    return true;
                }
                path.pop();
            }
        }
        false
    }
    for module in graph.keys() {
        let mut path = vec![module.clone()];
        let found =
            reaches(&graph, module, module, &mut BTreeSet::new(), &mut path);
        assert!(!found, "a cycle: {}", path.join(" -> "));
    }
}

#[test]
fn the_parser_sees_nested_and_plain_paths() {
    let code = code_of(
        "use crate::{a::{b, c}, d, e::f as g};\n\
         // crate::commented\n\
         fn x() { crate::h::call(); other_crate::i(); }\n\
         #[cfg(test)]\n\
         mod tests {\n    use crate::j;\n}\n",
    );
    let refs: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(refs, ["a", "d", "e", "h"]);
}
