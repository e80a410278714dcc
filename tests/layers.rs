//! The crate's layers, checked over its source: every `crate::` path in a
//! top-level module of `src/` (tests excluded) may only name a module of
//! a lower layer or of its own, and no two modules may depend on each
//! other, directly or through others. A new dependency that goes the
//! wrong way fails here with the file that made it. Below the top level,
//! the modules of one folder (`source/file` and `source/kube`) may not
//! depend on each other in a circle either, however the path is written.
//!
//! The layers, lowest first. Pure data and settings at the bottom; the
//! telemetry takes typed events from everyone above; the trackers, the
//! desired state and the sources turn objects into data, and a node's
//! view is made of that data; the kernel facilities, the sync state and
//! the API side (which serves views) use them; the backend contract sits
//! between the sync state and what implements it, and `explain`'s answer
//! is read from the sync state beside it; the daemon runs the
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
    &["backend", "explanation"],
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

/// Every path a piece of code names from `crate`, `super` or `self`, as
/// written (`["super", "pods", "derive"]`), its use trees expanded:
/// `crate::{a::{b, c}, d}` is `crate::a::b`, `crate::a::c`, `crate::d`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .any(|p| code[at..].starts_with(p));
        // `some_crate::` or the middle of `a::super::`: not a path's start.
        let inside = at > 0 && (ident(bytes[at - 1]) || bytes[at - 1] == b':');
        if starts && !inside {
            at = use_tree(bytes, at, Vec::new(), &mut found);
        } else {
            at += 1;
        }
    }
    found
}

/// Reads the use tree (or plain path) at `at` below `prefix` into
/// `found`; returns where it ends.
fn use_tree(
    bytes: &[u8],
    mut at: usize,
    mut prefix: Vec<String>,
    found: &mut Vec<Vec<String>>,
) -> usize {
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let skip_space = |mut at: usize| {
        while at < bytes.len() && bytes[at].is_ascii_whitespace() {
            at += 1;
        }
        at
    };
    loop {
        at = skip_space(at);
        if bytes.get(at) == Some(&b'{') {
            at += 1;
            loop {
                at = skip_space(at);
                match bytes.get(at) {
                    None => return at,
                    Some(b'}') => return at + 1,
                    Some(b',') => at += 1,
                    Some(_) => {
                        let before = at;
                        at = use_tree(bytes, at, prefix.clone(), found);
                        // `*` and the like: step over what is no path.
                        if at == before {
                            at += 1;
                        }
                    }
                }
            }
        }
        let name_start = at;
        while at < bytes.len() && ident(bytes[at]) {
            at += 1;
        }
        if at > name_start {
            let name = String::from_utf8_lossy(&bytes[name_start..at]);
            if name != "self" || prefix.is_empty() {
                prefix.push(name.into_owned());
            }
        }
        if bytes[at..].starts_with(b"::") && at > name_start {
            at += 2;
            continue;
        }
        if !prefix.is_empty() {
            found.push(prefix);
        }
        // `path as alias`: the alias names nothing.
        let after = skip_space(at);
        if bytes[after..].starts_with(b"as")
            && bytes
                .get(after + 2)
                .is_some_and(|b| b.is_ascii_whitespace())
        {
            at = skip_space(after + 2);
            while at < bytes.len() && ident(bytes[at]) {
                at += 1;
            }
        }
        return at;
    }
}

/// Top-level modules a piece of code names through `crate::`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    paths(code)
        .into_iter()
        .filter(|path| path[0] == "crate")
        .filter_map(|path| path.get(1).cloned())
        .filter(|name| name != "self" && name != "super")
        .collect()
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

/// The module a file of `src` holds: `src/a/b.rs` and `src/a/b/mod.rs`
/// are `a::b`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("a file of src");
    let mut path: Vec<String> = rel
        .parent()
        .into_iter()
        .flat_map(|p| p.components())
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let stem = rel.file_stem().expect("a file name").to_string_lossy();
    if stem != "mod" {
        path.push(stem.into_owned());
    }
    path
}

/// A path as written, from the module that writes it, made absolute.
fn resolve(path: &[String], module: &[String]) -> Vec<String> {
    let mut absolute = module.to_vec();
    for (i, segment) in path.iter().enumerate() {
        match segment.as_str() {
            "crate" if i == 0 => absolute.clear(),
            "self" if i == 0 => {}
            "super" => {
                absolute.pop();
            }
            _ => {
                absolute.extend(path[i..].iter().cloned());
                break;
            }
        }
    }
    absolute
}

/// For every folder below `src` (its tests aside), its modules and which
/// of them each uses, through any path (`super::x`, `crate::a::x`).
fn sibling_graphs(src: &Path) -> Vec<(PathBuf, Graph)> {
    fn folders(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() && path.file_name().is_some_and(|n| n != "tests") {
                out.push(path.clone());
                folders(&path, out);
            }
        }
    }
    let mut all = Vec::new();
    folders(src, &mut all);
    all.sort();
    all.into_iter()
        .map(|folder| {
            let parent = module_path(src, &folder.join("mod.rs"));
            let siblings: BTreeSet<String> = fs::read_dir(&folder)
                .expect("a readable folder")
                .flatten()
                .filter_map(|entry| {
                    let path = entry.path();
                    let name = path.file_stem()?.to_str()?.to_owned();
                    let module = path.is_dir() || path.extension()? == "rs";
                    (module && name != "mod" && name != "tests").then_some(name)
                })
                .collect();
            let mut graph = Graph::new();
            for sibling in &siblings {
                let mut deps = BTreeMap::new();
                for file in files_of(&folder, sibling) {
                    let text =
                        fs::read_to_string(&file).expect("a readable file");
                    let module = module_path(src, &file);
                    for path in paths(&code_of(&text)) {
                        let path = resolve(&path, &module);
                        let Some(dep) = path
                            .strip_prefix(parent.as_slice())
                            .and_then(|rest| rest.first())
                        else {
                            continue;
                        };
                        if dep != sibling && siblings.contains(dep) {
                            deps.entry(dep.clone())
                                .or_insert_with(|| file.clone());
                        }
                    }
                }
                graph.insert(sibling.clone(), deps);
            }
            (folder, graph)
        })
        .collect()
}

fn sibling_cycles(src: &Path) -> Vec<String> {
    sibling_graphs(src)
        .into_iter()
        .filter_map(|(folder, graph)| {
            let path = cycle(&graph)?;
            Some(format!("{}: {}", shown(&folder), describe(&graph, &path)))
        })
        .collect()
}

#[test]
fn no_two_modules_of_one_folder_depend_on_each_other() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let cycles = sibling_cycles(&src);
    assert!(cycles.is_empty(), "cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_folder_check_sees_a_circle_through_super_and_crate() {
    let dir = std::env::temp_dir()
        .join(format!("layers-folder-check-{}", std::process::id()));
    let src_of = |name: &str, files: &[(&str, &str)]| -> PathBuf {
        let src = dir.join(name);
        for (file, text) in files {
            let file = src.join(file);
            fs::create_dir_all(file.parent().expect("a folder"))
                .expect("a scratch folder");
            fs::write(file, text).expect("a scratch file");
        }
        src
    };
    let clean = src_of(
        "clean",
        &[
            ("a/mod.rs", "mod x;\nmod y;\n"),
            ("a/x.rs", "use super::y::f;\nuse crate::b::x::g;\n"),
            ("a/y.rs", "use super::Shared;\n"),
            ("b/x.rs", "use crate::a::{x::h as i};\n"),
        ],
    );
    let circle = src_of(
        "circle",
        &[
            ("a/mod.rs", "mod x;\nmod y;\n"),
            ("a/x.rs", "fn f() { super::y::f(); }\n"),
            ("a/y/mod.rs", "mod z;\n"),
            ("a/y/z.rs", "use crate::a::{self, x::{g, h}};\n"),
        ],
    );
    let outcome = (sibling_cycles(&clean), sibling_cycles(&circle));
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(outcome.0, Vec::<String>::new());
    assert_eq!(outcome.1.len(), 1, "{:?}", outcome.1);
    assert!(
        outcome.1[0].contains("x -> y") || outcome.1[0].contains("y -> x"),
        "{:?}",
        outcome.1
    );
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
