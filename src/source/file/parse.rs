//! The file's text into a [`Snapshot`]: YAML documents or JSON, single
//! objects or `List`s, each object decoded as its kind says, with the
//! line of every error.

use std::{collections::HashSet, fmt};

use k8s_openapi::{
    api::{
        core::v1::{Node, Service},
        discovery::v1::EndpointSlice,
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde::{
    de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor},
    Deserialize, Deserializer,
};

use super::{ParseError, Snapshot};

/// Namespaced objects without a namespace land here, as with kubectl.
const DEFAULT_NAMESPACE: &str = "default";

/// Parses the whole text: the first error fails it all, so that a
/// half-understood file never replaces a good one.
pub fn parse(text: &str) -> Result<Snapshot, ParseError> {
    // Some Windows editors start files with a byte-order mark.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut snapshot = Snapshot::default();
    let mut seen = HashSet::new();
    let trimmed = text.trim_start();
    let json = if trimmed.starts_with('{') || trimmed.starts_with('[') {
        match parse_json(text) {
            Ok(objects) => Some(objects),
            // Not JSON after all, but maybe YAML in flow style
            // (`{kind: Node, ...}`): YAML has the last word, and its error
            // is as precise.
            Err(JsonError::Syntax) => None,
            Err(JsonError::Data(e)) => return Err(e),
        }
    } else {
        None
    };
    if let Some(objects) = json {
        add_all(&mut snapshot, &mut seen, objects, 1)?;
    } else {
        for doc in split_documents(text) {
            let start = doc.content_line().unwrap_or(1);
            let objects = parse_yaml_document(&doc.text, start)
                .map_err(|e| e.shifted(doc.first_line))?;
            add_all(&mut snapshot, &mut seen, objects, doc.first_line + start)?;
        }
    }
    Ok(snapshot)
}

/// An object read from the file, with where it was found for errors that
/// are only noticed once it is whole.
struct Found {
    object: Object,
    /// `items[3]` inside a list; empty for a document of its own.
    path: String,
}

// Each lives only from the read to its Vec in the snapshot.
#[allow(clippy::large_enum_variant)]
enum Object {
    Service(Service),
    EndpointSlice(EndpointSlice),
    Node(Node),
    Other(serde_json::Value),
}

/// Checks what can only be checked on whole objects, defaults the
/// namespace, and files them by kind. `line` is where their document
/// starts: the deserializer's position is gone by now.
fn add_all(
    snapshot: &mut Snapshot,
    seen: &mut HashSet<(&'static str, String, String)>,
    objects: Vec<Found>,
    line: u64,
) -> Result<(), ParseError> {
    for found in objects {
        let at = |what: &str| {
            let prefix = if found.path.is_empty() {
                String::new()
            } else {
                format!("{}: ", found.path)
            };
            ParseError::at_line(line, format!("{prefix}{what}"))
        };
        let typed = match &found.object {
            Object::Service(o) => Some(("Service", &o.metadata)),
            Object::EndpointSlice(o) => Some(("EndpointSlice", &o.metadata)),
            Object::Node(o) => Some(("Node", &o.metadata)),
            Object::Other(_) => None,
        };
        if let Some((kind, meta)) = typed {
            let name = meta.name.as_deref().unwrap_or_default();
            if name.is_empty() {
                return Err(at(&format!("{kind} without metadata.name")));
            }
            let namespace = match kind {
                "Node" => "",
                _ => meta
                    .namespace
                    .as_deref()
                    .filter(|ns| !ns.is_empty())
                    .unwrap_or(DEFAULT_NAMESPACE),
            };
            if !seen.insert((kind, namespace.to_string(), name.to_string())) {
                let key = if namespace.is_empty() {
                    name.to_string()
                } else {
                    format!("{namespace}/{name}")
                };
                return Err(at(&format!("{kind} {key} appears twice")));
            }
        }
        // The API server's defaults, as `kubectl apply` would have had
        // them stored; what it would allocate must be in the file.
        let named = |kind: &str, meta: &ObjectMeta, reason: String| {
            at(&format!(
                "{kind} {}/{}: {reason}",
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default()
            ))
        };
        match found.object {
            Object::Service(mut o) => {
                default_namespace(&mut o.metadata.namespace);
                crate::source::defaults::service(&mut o)
                    .map_err(|r| named("Service", &o.metadata, r))?;
                snapshot.services.push(o);
            }
            Object::EndpointSlice(mut o) => {
                default_namespace(&mut o.metadata.namespace);
                crate::source::defaults::endpoint_slice(&mut o)
                    .map_err(|r| named("EndpointSlice", &o.metadata, r))?;
                snapshot.endpoint_slices.push(o);
            }
            Object::Node(o) => snapshot.nodes.push(o),
            Object::Other(v) => snapshot.others.push(v),
        }
    }
    Ok(())
}

fn default_namespace(namespace: &mut Option<String>) {
    if namespace.as_deref().unwrap_or_default().is_empty() {
        *namespace = Some(DEFAULT_NAMESPACE.to_string());
    }
}

/// One YAML document and the number of lines before it in the file.
struct Document {
    first_line: u64,
    text: String,
}

/// Splits YAML text at document markers. A line starting with `---` or
/// `...` (then a space or its end) is a marker wherever it appears: YAML
/// forbids such lines inside any content, so no parse is needed to find
/// them. Splitting first lets each document be read twice (once for its
/// kind, once into its type) without losing its line numbers.
fn split_documents(text: &str) -> Vec<Document> {
    fn is_marker(line: &str, marker: &str) -> bool {
        line.strip_prefix(marker).is_some_and(|rest| {
            rest.is_empty() || rest.starts_with([' ', '\t'])
        })
    }
    let mut docs = Vec::new();
    let mut current = Document {
        first_line: 0,
        text: String::new(),
    };
    for (n, line) in (0u64..).zip(text.lines()) {
        if is_marker(line, "---") || is_marker(line, "...") {
            docs.push(std::mem::replace(
                &mut current,
                Document {
                    first_line: n,
                    text: String::new(),
                },
            ));
            if is_marker(line, "---") {
                // Content may follow the marker on its line (`--- {a: 1}`);
                // blanking the marker keeps the columns right.
                current.text.push_str("   ");
                current.text.push_str(line.get(3..).unwrap_or_default());
            }
            current.text.push('\n');
            continue;
        }
        current.text.push_str(line);
        current.text.push('\n');
    }
    docs.push(current);
    docs.retain(|doc| doc.content_line().is_some());
    docs
}

impl Document {
    /// The first line in the document (1-based) that is not blank, a
    /// comment or a directive: where errors about a whole object point.
    fn content_line(&self) -> Option<u64> {
        (1u64..).zip(self.text.lines()).find_map(|(n, l)| {
            let l = l.trim();
            let content =
                !l.is_empty() && !l.starts_with('#') && !l.starts_with('%');
            content.then_some(n)
        })
    }
}

/// What a document is, read in a first pass: a list must be seen whole
/// before its items can be typed, since `kind: List` comes after `items`
/// in what kubectl writes.
#[derive(Deserialize)]
struct Head {
    #[serde(default, deserialize_with = "text")]
    kind: Option<String>,
    #[serde(default, rename = "apiVersion", deserialize_with = "text")]
    api_version: Option<String>,
    items: Option<Vec<ItemHead>>,
}

#[derive(Deserialize)]
struct ItemHead {
    #[serde(default, deserialize_with = "text")]
    kind: Option<String>,
    #[serde(default, rename = "apiVersion", deserialize_with = "text")]
    api_version: Option<String>,
}

/// `kind` and `apiVersion` must be strings. YAML would read `kind: false`
/// into a string as "false" where JSON refuses it; kubectl refuses both,
/// and so do we, so that a file means the same in either form.
fn text<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    struct Text;
    impl<'de> Visitor<'de> for Text {
        type Value = Option<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(v.to_owned()))
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<S: Deserializer<'de>>(
            self,
            d: S,
        ) -> Result<Self::Value, S::Error> {
            d.deserialize_any(Text)
        }
    }
    d.deserialize_option(Text)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Service,
    EndpointSlice,
    Node,
    Other,
}

impl Kind {
    /// Only the API groups we read are typed: a `Service` of another group
    /// (Knative's, say) is someone else's object and kept aside. Within
    /// our groups any version is typed, so that an unsupported one is an
    /// error at its line rather than an object silently set aside. A
    /// missing apiVersion is taken to mean ours, as for list items from the
    /// API server.
    fn of(api_version: Option<&str>, kind: &str) -> Kind {
        let group = api_version.map(|v| v.rsplit_once('/').map_or("", |g| g.0));
        match (kind, group) {
            ("Service", None | Some("")) => Kind::Service,
            ("Node", None | Some("")) => Kind::Node,
            ("EndpointSlice", None | Some("discovery.k8s.io")) => {
                Kind::EndpointSlice
            }
            _ => Kind::Other,
        }
    }
}

/// How the second pass reads a document.
enum Plan {
    /// One object of its own.
    Object(Kind),
    /// A mapping whose `items` hold objects of these kinds, in order; a
    /// typed list's items may leave out what it implies.
    List(Vec<Kind>, Option<Implied>),
    /// A bare sequence of objects (JSON only).
    Array(Vec<Kind>),
}

impl Plan {
    fn of_document(head: Head) -> Result<Plan, String> {
        let Some(kind) = head.kind.filter(|k| !k.is_empty()) else {
            return Err("kind is missing".into());
        };
        let Some(items) = head.items.filter(|_| kind.ends_with("List")) else {
            return Ok(Plan::Object(Kind::of(
                head.api_version.as_deref(),
                &kind,
            )));
        };
        // A typed list (`ServiceList`) may leave kind and apiVersion out of
        // its items, as the API server does; a plain `List` may not.
        let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
        let kinds = Plan::items(items, item_kind, head.api_version.as_deref())?;
        let implied = item_kind.map(|kind| Implied {
            kind: kind.to_string(),
            api_version: head.api_version.clone(),
        });
        Ok(Plan::List(kinds, implied))
    }

    fn items(
        items: Vec<ItemHead>,
        default_kind: Option<&str>,
        default_api_version: Option<&str>,
    ) -> Result<Vec<Kind>, String> {
        let mut kinds = Vec::with_capacity(items.len());
        for (i, item) in items.into_iter().enumerate() {
            let kind = match (item.kind.as_deref(), default_kind) {
                (Some(kind), _) if !kind.is_empty() => kind,
                (_, Some(kind)) => kind,
                _ => return Err(format!("items[{i}]: kind is missing")),
            };
            let api_version = match default_kind {
                Some(_) => item.api_version.as_deref().or(default_api_version),
                None => item.api_version.as_deref(),
            };
            kinds.push(Kind::of(api_version, kind));
        }
        Ok(kinds)
    }
}

/// What a typed list (`PodList`) says of its items that they may leave
/// out: their kind, and the list's apiVersion.
struct Implied {
    kind: String,
    api_version: Option<String>,
}

impl Implied {
    /// Writes into an object set aside what its list implied, so that it
    /// says its kind on its own (the Pods a PodList holds are read by
    /// kind) and prints as an object that reads back the same.
    fn fill(&self, object: &mut Object) {
        let Object::Other(serde_json::Value::Object(map)) = object else {
            return;
        };
        // As `Plan::items` read them: an empty kind is no kind, an empty
        // apiVersion is one.
        let kind = map.get("kind").and_then(|v| v.as_str());
        if kind.is_none_or(str::is_empty) {
            map.insert("kind".into(), self.kind.clone().into());
        }
        if let Some(api_version) = &self.api_version {
            if map.get("apiVersion").is_none_or(|v| v.is_null()) {
                map.insert("apiVersion".into(), api_version.clone().into());
            }
        }
    }
}

/// Reads one object of a known kind.
struct ObjectSeed(Kind);

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = Object;

    fn deserialize<D: Deserializer<'de>>(
        self,
        d: D,
    ) -> Result<Object, D::Error> {
        Ok(match self.0 {
            Kind::Service => Object::Service(Service::deserialize(d)?),
            Kind::EndpointSlice => {
                Object::EndpointSlice(EndpointSlice::deserialize(d)?)
            }
            Kind::Node => Object::Node(Node::deserialize(d)?),
            Kind::Other => Object::Other(serde_json::Value::deserialize(d)?),
        })
    }
}

/// Reads a sequence of objects whose kinds are known in order.
struct ItemsSeed<'a>(&'a [Kind]);

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Vec<Found>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        d: D,
    ) -> Result<Vec<Found>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Vec<Found>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a sequence of API objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(
        self,
        mut seq: A,
    ) -> Result<Vec<Found>, A::Error> {
        let mut out = Vec::with_capacity(self.0.len());
        loop {
            let i = out.len();
            // The first pass saw the same items; Other is only a guard.
            let kind = self.0.get(i).copied().unwrap_or(Kind::Other);
            match seq.next_element_seed(ObjectSeed(kind))? {
                Some(object) => out.push(Found {
                    object,
                    path: format!("items[{i}]"),
                }),
                None => return Ok(out),
            }
        }
    }
}

/// Reads a list's mapping, keeping only its items.
struct ListSeed<'a>(&'a [Kind]);

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = Vec<Found>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        d: D,
    ) -> Result<Vec<Found>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = Vec<Found>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a List of API objects")
    }

    fn visit_map<A: MapAccess<'de>>(
        self,
        mut map: A,
    ) -> Result<Vec<Found>, A::Error> {
        let mut items = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                if items.is_some() {
                    return Err(de::Error::duplicate_field("items"));
                }
                items = Some(map.next_value_seed(ItemsSeed(self.0))?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(items.unwrap_or_default())
    }
}

impl<'de> DeserializeSeed<'de> for &Plan {
    type Value = Vec<Found>;

    fn deserialize<D: Deserializer<'de>>(
        self,
        d: D,
    ) -> Result<Vec<Found>, D::Error> {
        match self {
            Plan::Object(kind) => {
                let object = ObjectSeed(*kind).deserialize(d)?;
                Ok(vec![Found {
                    object,
                    path: String::new(),
                }])
            }
            Plan::List(kinds, implied) => {
                let mut found = ListSeed(kinds).deserialize(d)?;
                if let Some(implied) = implied {
                    found.iter_mut().for_each(|f| implied.fill(&mut f.object));
                }
                Ok(found)
            }
            Plan::Array(kinds) => ItemsSeed(kinds).deserialize(d),
        }
    }
}

/// Budgets sized for a whole cluster in one `List`, not for the small
/// configuration files the defaults are meant for.
fn yaml_options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: 100_000_000,
            max_nodes: 50_000_000,
            max_total_scalar_bytes: 1 << 30,
        },
        with_snippet: false,
    }
}

/// Reads one document; `start` is the line its content starts on, where
/// errors about the document as a whole point.
fn parse_yaml_document(
    text: &str,
    start: u64,
) -> Result<Vec<Found>, ParseError> {
    let head: Head = serde_saphyr::from_str_with_options(text, yaml_options())
        .map_err(|e| yaml_error(&e, ""))?;
    let plan = Plan::of_document(head)
        .map_err(|reason| ParseError::at_line(start, reason))?;
    let mut path = String::new();
    serde_saphyr::with_deserializer_from_str_with_options(
        text,
        yaml_options(),
        |d| {
            let mut track = serde_path_to_error::Track::new();
            let out = (&plan).deserialize(
                serde_path_to_error::Deserializer::new(d, &mut track),
            );
            if out.is_err() {
                path = track.path().to_string();
            }
            out
        },
    )
    .map_err(|e| yaml_error(&e, &path))
}

fn yaml_error(e: &serde_saphyr::Error, path: &str) -> ParseError {
    use serde_saphyr::MessageFormatter;
    let e = e.without_snippet();
    let message = serde_saphyr::DefaultMessageFormatter.format_message(e);
    // The message may quote the input; keep it on one line in the log.
    let mut one_line = String::with_capacity(message.len());
    for c in message.chars() {
        if c.is_control() {
            one_line.extend(c.escape_default());
        } else {
            one_line.push(c);
        }
    }
    let (line, column) = match e.location() {
        Some(loc) if loc.line() > 0 => {
            (Some(loc.line()), Some(loc.column()).filter(|c| *c > 0))
        }
        _ => (None, None),
    };
    ParseError {
        line,
        column,
        reason: with_path(path, &one_line),
    }
}

/// serde_path_to_error names the root `.`; a root error needs no path.
fn with_path(path: &str, message: &str) -> String {
    if path.is_empty() || path == "." {
        message.to_string()
    } else {
        format!("{path}: {message}")
    }
}

enum JsonError {
    /// The text is not JSON.
    Syntax,
    /// It is JSON, but not the objects it should be.
    Data(ParseError),
}

fn parse_json(text: &str) -> Result<Vec<Found>, JsonError> {
    let json_error = |e: serde_json::Error, path: &str| {
        if e.is_syntax() || e.is_eof() {
            return JsonError::Syntax;
        }
        JsonError::Data(ParseError {
            line: Some(e.line() as u64).filter(|l| *l > 0),
            column: Some(e.column() as u64).filter(|c| *c > 0),
            reason: with_path(path, &strip_json_position(&e)),
        })
    };
    let at_start = |reason| JsonError::Data(ParseError::at_line(1, reason));
    let plan = if text.trim_start().starts_with('[') {
        let items: Vec<ItemHead> =
            serde_json::from_str(text).map_err(|e| json_error(e, ""))?;
        Plan::Array(Plan::items(items, None, None).map_err(at_start)?)
    } else {
        let head: Head =
            serde_json::from_str(text).map_err(|e| json_error(e, ""))?;
        Plan::of_document(head).map_err(at_start)?
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let mut track = serde_path_to_error::Track::new();
    let found = (&plan)
        .deserialize(serde_path_to_error::Deserializer::new(
            &mut de, &mut track,
        ))
        .map_err(|e| json_error(e, &track.path().to_string()))?;
    de.end().map_err(|e| json_error(e, ""))?;
    Ok(found)
}

/// serde_json appends " at line L column C" to its messages; the position
/// is reported separately.
fn strip_json_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    message
        .strip_suffix(&suffix)
        .map(str::to_string)
        .unwrap_or(message)
}
