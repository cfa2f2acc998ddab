//! Every link of the project's Markdown resolves: the README, the book (`docs/`), the benchmark reports and
//! the mutation tables. A relative link must name a file or folder of the tree, and a `#fragment` a heading
//! of the page it points to (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
//! Links to other sites are not fetched.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use ferrocomm_tests::workspace_root;
use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};

/// The Markdown files of the tree, without build outputs and copies of other trees.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "node_modules" {
            continue;
        }
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            markdown_files(&path, out);
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// GitHub's anchor of a heading: lower case, letters, digits, `-` and `_` kept, spaces as `-`, the rest
/// dropped; a repeated heading gets `-1`, `-2`, ...
fn anchors(markdown: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    let mut heading: Option<String> = None;
    for event in Parser::new_ext(markdown, Options::all()) {
        match event {
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let text = heading.take().unwrap_or_default();
                let slug: String = text
                    .to_lowercase()
                    .chars()
                    .filter_map(|c| match c {
                        ' ' => Some('-'),
                        c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                        _ => None,
                    })
                    .collect();
                let n = seen.entry(slug.clone()).or_insert(0);
                out.insert(if *n == 0 { slug.clone() } else { format!("{slug}-{n}") });
                *n += 1;
            }
            _ => {}
        }
    }
    out
}

/// The destinations of a page's links and images.
fn links(markdown: &str) -> Vec<String> {
    Parser::new_ext(markdown, Options::all())
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => Some(dest_url.into_string()),
            _ => None,
        })
        .collect()
}

/// `path` without `.` and `..` components (the file need not exist).
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

#[test]
fn every_markdown_link_resolves() {
    let root = workspace_root();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    files.sort();
    assert!(files.iter().any(|f| f.ends_with("README.md")), "no README.md under {}", root.display());
    let mut broken = Vec::new();
    // Each linked page's anchors, read once however many links point into it.
    let mut headings_of: BTreeMap<PathBuf, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let page = file.strip_prefix(&root).unwrap().display().to_string();
        for dest in links(&text) {
            if dest.contains("://") || dest.starts_with("mailto:") {
                continue;
            }
            let (path, fragment) = dest.split_once('#').map_or((dest.as_str(), None), |(p, f)| (p, Some(f)));
            let target = if path.is_empty() { file.clone() } else { normalise(&file.parent().unwrap().join(path)) };
            if !target.starts_with(&root) || !target.exists() {
                broken.push(format!("{page}: `{dest}`: no such file in the tree"));
                continue;
            }
            let Some(fragment) = fragment.filter(|f| !f.is_empty()) else { continue };
            if target.extension().is_some_and(|e| e == "md") {
                let headings = headings_of
                    .entry(target.clone())
                    .or_insert_with(|| anchors(&std::fs::read_to_string(&target).unwrap()));
                if !headings.contains(fragment) {
                    broken.push(format!("{page}: `{dest}`: no heading with the anchor `#{fragment}`"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "{} broken links:\n{}", broken.len(), broken.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    let page = "# ferrocomm\n## Why the nvptx64 target and cudarc\n## Known limitations\n## Known limitations\n### `#[kernel]` options\n";
    let got = anchors(page);
    for want in
        ["ferrocomm", "why-the-nvptx64-target-and-cudarc", "known-limitations", "known-limitations-1", "kernel-options"]
    {
        assert!(got.contains(want), "{want} missing from {got:?}");
    }
}
