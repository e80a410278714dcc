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
//!
//! The benches have no layers, but the same rule against circles: in
//! each bench target and in bench-support, no module may use one that
//! uses it, and none may use the crate root's items (the root uses
//! every module). What two benches share is bench-support's, never a
//! file one includes from another's folder.

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
        "signals",
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

/// Each module, what it uses and the first file that does.
type Graph = BTreeMap<String, BTreeMap<String, PathBuf>>;

fn graph() -> Graph {
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

/// A path from some module back to itself, if there is one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    // Depth-first search from each module; a path back to it is a cycle.
    fn reaches(
        graph: &Graph,
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
    graph.keys().find_map(|module| {
        let mut path = vec![module.clone()];
        reaches(graph, module, module, &mut BTreeSet::new(), &mut path)
            .then_some(path)
    })
}

/// A file of this package as its repository names it.
fn shown(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// `a -> b (the file of a that uses b) -> ...`
fn describe(graph: &Graph, path: &[String]) -> String {
    let mut out = path[0].clone();
    for step in path.windows(2) {
        let file = &graph[&step[0]][&step[1]];
        out.push_str(&format!(" -> {} ({})", step[1], shown(file)));
    }
    out
}

#[test]
fn no_two_modules_depend_on_each_other() {
    let graph = graph();
    if let Some(path) = cycle(&graph) {
        panic!("a cycle: {}", describe(&graph, &path));
    }
}

/// What a bench module naming the crate root's own items depends on:
/// the root, which declares and uses every module.
const ROOT: &str = "(crate root)";

/// Every bench target's crate root (a file of benches/, or
/// benches/NAME/main.rs) and bench-support's.
fn bench_roots() -> Vec<PathBuf> {
    let benches = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches");
    let mut roots = vec![benches.join("support/src/lib.rs")];
    for entry in fs::read_dir(&benches).expect("benches/").flatten() {
        let path = entry.path();
        if path.is_dir() {
            let main = path.join("main.rs");
            if main.exists() {
                roots.push(main);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            roots.push(path);
        }
    }
    roots.sort();
    roots
}

/// The modules a crate root declares (`mod name;`), each with its files
/// beside the root: NAME.rs, or what lies under NAME/; the one file a
/// `#[path]` names, so that its circles are found too.
fn declared_modules(root: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let dir = root.parent().expect("a root in a folder");
    let text = fs::read_to_string(root).expect("a readable root");
    let mut modules = BTreeMap::new();
    let mut path = None;
    for line in code_of(&text).lines() {
        let line = line.trim();
        if let Some(file) = line
            .strip_prefix("#[path = \"")
            .and_then(|l| l.strip_suffix("\"]"))
        {
            path = Some(dir.join(file));
            continue;
        }
        if line.starts_with("#[") {
            continue;
        }
        let line = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub "))
            .unwrap_or(line);
        let Some(name) =
            line.strip_prefix("mod ").and_then(|l| l.strip_suffix(';'))
        else {
            path = None;
            continue;
        };
        let name = name.trim().to_owned();
        // A crate's unit tests use whatever they test, the root's
        // re-exports included; as in src/, they are not checked.
        if name == "tests" {
            path = None;
            continue;
        }
        let files = match path.take() {
            Some(file) => vec![file],
            None => files_of(dir, &name),
        };
        modules.insert(name, files);
    }
    modules
}

/// A bench crate's modules and the crate root, with what each uses.
fn bench_graph(root: &Path) -> Graph {
    let dir = root.parent().expect("a root in a folder");
    let modules = declared_modules(root);
    let mut graph = Graph::new();
    let declared = modules
        .keys()
        .map(|m| (m.clone(), root.to_owned()))
        .collect();
    graph.insert(ROOT.to_owned(), declared);
    for (module, files) in &modules {
        assert!(
            !files.is_empty(),
            "{}: no file for `mod {module};` beside it",
            shown(root)
        );
        let mut deps = BTreeMap::new();
        for file in files {
            let text = fs::read_to_string(file).expect("a readable file");
            let mut code = code_of(&text);
            // In the module's own file, `super` is the crate root.
            let own = [
                dir.join(format!("{module}.rs")),
                dir.join(module).join("mod.rs"),
            ];
            if own.contains(file) {
                code = code.replace("super::", "crate::");
            }
            for dep in crate_refs(&code) {
                let dep = if modules.contains_key(&dep) {
                    dep
                } else {
                    ROOT.to_owned()
                };
                if dep != *module {
                    deps.entry(dep).or_insert_with(|| file.clone());
                }
            }
        }
        graph.insert(module.clone(), deps);
    }
    graph
}

#[test]
fn no_bench_module_uses_one_that_uses_it() {
    let roots = bench_roots();
    assert!(roots.len() > 1, "no bench found in benches/");
    let cycles: Vec<String> = roots
        .iter()
        .filter_map(|root| {
            let graph = bench_graph(root);
            let path = cycle(&graph)?;
            Some(format!("{}: {}", shown(root), describe(&graph, &path)))
        })
        .collect();
    assert!(cycles.is_empty(), "cycles:\n{}", cycles.join("\n"));
}

/// The other crates of the tree: ipvs-sys, the tests' kit, the protocol's
/// generated types, the conformance harness's tool and the test crates of
/// more than one file, whose modules may not use each other in a circle
/// either (ipvs-sys's message types, as
/// `netlink-packet-route`'s, never refer to the handle that sends them).
#[test]
fn no_other_crate_of_the_tree_has_a_module_circle() {
    let base = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cycles: Vec<String> = [
        "ipvs-sys/src/lib.rs",
        "nodeview-protocol/src/lib.rs",
        "tests/testkit/src/lib.rs",
        "tests/conformance/tool/src/main.rs",
        "tests/cluster_e2e/main.rs",
        "tests/proxy_traffic/main.rs",
        "tests/deploy_manifests.rs",
    ]
    .iter()
    .filter_map(|root| {
        let root = base.join(root);
        assert!(root.exists(), "{} is gone: update the list", shown(&root));
        let graph = bench_graph(&root);
        let path = cycle(&graph)?;
        Some(format!("{}: {}", shown(&root), describe(&graph, &path)))
    })
    .collect();
    assert!(cycles.is_empty(), "cycles:\n{}", cycles.join("\n"));
}

#[test]
fn no_bench_includes_a_file_by_path() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let included: Vec<String> = files_of(root, "benches")
        .into_iter()
        .filter(|file| {
            let text = fs::read_to_string(file).expect("a readable file");
            code_of(&text).contains("#[path")
        })
        .map(|file| shown(&file))
        .collect();
    assert!(
        included.is_empty(),
        "`#[path]` in {included:?}: what benches share belongs in \
         bench-support"
    );
}

#[test]
fn the_bench_check_sees_a_circle_through_the_root_and_super() {
    let dir = std::env::temp_dir()
        .join(format!("layers-bench-check-{}", std::process::id()));
    let crate_of = |name: &str, files: &[(&str, &str)]| -> PathBuf {
        let at = dir.join(name);
        fs::create_dir_all(&at).expect("a scratch folder");
        for (file, text) in files {
            fs::write(at.join(file), text).expect("a scratch file");
        }
        at.join("main.rs")
    };
    let root = "mod a;\nmod b;\npub struct Settings;\n";
    let clean = crate_of(
        "clean",
        &[
            ("main.rs", root),
            ("a.rs", "use crate::b::x;\n"),
            ("b.rs", ""),
        ],
    );
    let through_root = crate_of(
        "through_root",
        &[
            ("main.rs", root),
            ("a.rs", "use crate::b::x;\n"),
            ("b.rs", "fn f(_: crate::Settings) {}\n"),
        ],
    );
    let through_super = crate_of(
        "through_super",
        &[
            ("main.rs", root),
            ("a.rs", "use crate::b::x;\n"),
            ("b.rs", "use super::a::y;\n"),
        ],
    );
    let found = |root: &Path| cycle(&bench_graph(root));
    let outcome = (found(&clean), found(&through_root), found(&through_super));
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(outcome.0, None);
    assert!(outcome.1.is_some_and(|p| p.contains(&ROOT.to_owned())));
    assert!(outcome.2.is_some_and(|p| p.contains(&"a".to_owned())));
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
