//! The assignment-target rules CPython's parser enforces and `rustpython-parser` 0.4 leaves to its
//! compiler (`1 = x`, `f() += 1`, `del f()`, `for 1 in x`): checked over the parsed tree so
//! `validate_app_bundle` agrees with `ast.parse` (a test cross-checks against CPython).

use rustpython_parser::ast::{self, Expr, Ranged as _, Stmt};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    /// `=`, `for`, `with … as`: names, attributes, subscripts, starred, tuples and lists of them.
    Store,
    /// `+=` and annotated assignment: a single name, attribute or subscript.
    Single,
    /// `del`: like store, without starred.
    Del,
}

fn target_ok(expr: &Expr, ctx: Ctx) -> bool {
    match expr {
        Expr::Name(_) | Expr::Attribute(_) | Expr::Subscript(_) => true,
        Expr::Starred(s) => ctx == Ctx::Store && target_ok(&s.value, ctx),
        Expr::Tuple(t) => ctx != Ctx::Single && t.elts.iter().all(|e| target_ok(e, ctx)),
        Expr::List(l) => ctx != Ctx::Single && l.elts.iter().all(|e| target_ok(e, ctx)),
        _ => false,
    }
}

/// Byte offset of the first invalid target in `body` (statements only; expressions nested in
/// lambdas and comprehensions are not walked).
pub(crate) fn first_invalid_target(body: &[Stmt]) -> Option<u32> {
    body.iter().find_map(invalid_in_stmt)
}

fn check(expr: &Expr, ctx: Ctx) -> Option<u32> {
    (!target_ok(expr, ctx)).then(|| u32::from(expr.start()))
}

fn invalid_in_stmt(stmt: &Stmt) -> Option<u32> {
    match stmt {
        Stmt::Assign(s) => s.targets.iter().find_map(|t| check(t, Ctx::Store)),
        Stmt::AugAssign(s) => check(&s.target, Ctx::Single),
        Stmt::AnnAssign(s) => check(&s.target, Ctx::Single),
        Stmt::Delete(s) => s.targets.iter().find_map(|t| check(t, Ctx::Del)),
        Stmt::For(s) => check(&s.target, Ctx::Store)
            .or_else(|| first_invalid_target(&s.body))
            .or_else(|| first_invalid_target(&s.orelse)),
        Stmt::AsyncFor(s) => check(&s.target, Ctx::Store)
            .or_else(|| first_invalid_target(&s.body))
            .or_else(|| first_invalid_target(&s.orelse)),
        Stmt::With(s) => with_items(&s.items).or_else(|| first_invalid_target(&s.body)),
        Stmt::AsyncWith(s) => with_items(&s.items).or_else(|| first_invalid_target(&s.body)),
        Stmt::While(s) => first_invalid_target(&s.body).or_else(|| first_invalid_target(&s.orelse)),
        Stmt::If(s) => first_invalid_target(&s.body).or_else(|| first_invalid_target(&s.orelse)),
        Stmt::FunctionDef(s) => first_invalid_target(&s.body),
        Stmt::AsyncFunctionDef(s) => first_invalid_target(&s.body),
        Stmt::ClassDef(s) => first_invalid_target(&s.body),
        Stmt::Match(s) => s.cases.iter().find_map(|c| first_invalid_target(&c.body)),
        Stmt::Try(s) => try_parts(&s.body, &s.handlers, &s.orelse, &s.finalbody),
        Stmt::TryStar(s) => try_parts(&s.body, &s.handlers, &s.orelse, &s.finalbody),
        _ => None,
    }
}

fn with_items(items: &[ast::WithItem]) -> Option<u32> {
    items.iter().find_map(|i| {
        i.optional_vars
            .as_deref()
            .and_then(|v| check(v, Ctx::Store))
    })
}

fn try_parts(
    body: &[Stmt],
    handlers: &[ast::ExceptHandler],
    orelse: &[Stmt],
    finalbody: &[Stmt],
) -> Option<u32> {
    first_invalid_target(body)
        .or_else(|| {
            handlers.iter().find_map(|h| match h {
                ast::ExceptHandler::ExceptHandler(h) => first_invalid_target(&h.body),
            })
        })
        .or_else(|| first_invalid_target(orelse))
        .or_else(|| first_invalid_target(finalbody))
}
