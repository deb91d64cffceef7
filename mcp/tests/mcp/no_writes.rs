//! No tool writes: the whole surface runs against a read-only copy of the fixture, and the file
//! set, contents, modes and mtimes (files and directories) are identical afterwards.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::SystemTime;

use crate::fixture::candidate_digest;
use crate::support::{connect_root, fixture_copy};
use crate::surface::every_tool_call;

type State = BTreeMap<String, (bool, u32, SystemTime, Vec<u8>)>;

fn snapshot_tree(root: &Path, rel: &str, out: &mut State) {
    for entry in fs::read_dir(root.join(rel)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let rel = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        let meta = fs::symlink_metadata(entry.path()).unwrap();
        let content = if meta.is_file() {
            fs::read(entry.path()).unwrap()
        } else {
            Vec::new()
        };
        out.insert(
            rel.clone(),
            (
                meta.is_dir(),
                meta.permissions().mode(),
                meta.modified().unwrap(),
                content,
            ),
        );
        if meta.is_dir() {
            snapshot_tree(root, &rel, out);
        }
    }
}

fn set_read_only(path: &Path) {
    for entry in fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        let meta = fs::symlink_metadata(entry.path()).unwrap();
        if meta.is_dir() {
            set_read_only(&entry.path());
            fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o555)).unwrap();
        } else if meta.is_file() {
            fs::set_permissions(entry.path(), fs::Permissions::from_mode(0o444)).unwrap();
        }
    }
}

fn make_writable(path: &Path) {
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    for entry in fs::read_dir(path).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            make_writable(&entry.path());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_surface_writes_nothing() {
    let copy = fixture_copy();
    set_read_only(&copy.root);
    fs::set_permissions(&copy.root, fs::Permissions::from_mode(0o555)).unwrap();
    let mut before = State::new();
    snapshot_tree(&copy.root, "", &mut before);
    assert!(before.len() > 15);

    let client = connect_root(&copy.root, true).await;
    let calls = every_tool_call("app/modules/new-module/module.yaml", &candidate_digest());
    assert_eq!(calls.len(), mcp::TOOL_NAMES.len());
    for _ in 0..3 {
        for (tool, args) in &calls {
            client.ok(tool, args.clone()).await;
        }
    }
    client.close().await;

    let mut after = State::new();
    snapshot_tree(&copy.root, "", &mut after);
    assert!(before == after, "the workspace changed");
    make_writable(&copy.root);
}
