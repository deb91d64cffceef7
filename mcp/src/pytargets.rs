//! The assignment-target rules CPython's parser enforces and `rustpython-parser` 0.4 leaves to its
//! compiler (`1 = x`, `f() += 1`, `del f()`, `for 1 in x`): checked over the parsed tree so
//! `validate_app_bundle` agrees with `compile()` (a test cross-checks against CPython).

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

/// Where a statement sits, for the rules CPython's compiler (not its parser) enforces.
#[derive(Clone, Copy, Default)]
struct Place {
    in_function: bool,
    in_async: bool,
    in_loop: bool,
}

/// Byte offset and message of the first error `compile(…, "exec")` would raise that the parser
/// accepts: invalid assignment or deletion targets, `return`/`yield`/`await` outside a function,
/// `break`/`continue` outside a loop, `nonlocal` at module level, `import *` inside a function,
/// `async for`/`async with` outside an async function, duplicate argument names, and a bare
/// `except:` that is not last.
pub(crate) fn first_compile_error(body: &[Stmt]) -> Option<(u32, &'static str)> {
    first_invalid_target(body)
        .map(|o| {
            (
                o,
                "Python source has an invalid assignment or deletion target.",
            )
        })
        .or_else(|| placement(body, Place::default()))
}

fn at(stmt: &impl rustpython_parser::ast::Ranged) -> u32 {
    u32::from(stmt.start())
}

fn function_place(is_async: bool) -> Place {
    Place {
        in_function: true,
        in_async: is_async,
        in_loop: false,
    }
}

fn duplicate_args(args: &ast::Arguments) -> bool {
    let mut names: Vec<&str> = args
        .posonlyargs
        .iter()
        .chain(&args.args)
        .chain(&args.kwonlyargs)
        .map(|a| a.def.arg.as_str())
        .collect();
    names.extend(args.vararg.iter().map(|a| a.arg.as_str()));
    names.extend(args.kwarg.iter().map(|a| a.arg.as_str()));
    let total = names.len();
    names.sort_unstable();
    names.dedup();
    names.len() != total
}

fn bare_except_not_last(handlers: &[ast::ExceptHandler]) -> Option<u32> {
    let count = handlers.len();
    handlers.iter().enumerate().find_map(|(i, h)| match h {
        ast::ExceptHandler::ExceptHandler(h) => {
            (h.type_.is_none() && i + 1 < count).then(|| u32::from(h.range.start()))
        }
    })
}

fn expr_outside(value: &Expr, place: Place) -> Option<&'static str> {
    match value {
        Expr::Yield(_) | Expr::YieldFrom(_) if !place.in_function => {
            Some("'yield' outside function")
        }
        Expr::Await(_) if !place.in_function => Some("'await' outside function"),
        Expr::Await(_) if !place.in_async => Some("'await' outside async function"),
        _ => None,
    }
}

fn placement(body: &[Stmt], place: Place) -> Option<(u32, &'static str)> {
    body.iter().find_map(|stmt| placement_stmt(stmt, place))
}

fn placement_stmt(stmt: &Stmt, place: Place) -> Option<(u32, &'static str)> {
    let looped = Place {
        in_loop: true,
        ..place
    };
    match stmt {
        Stmt::Return(s) if !place.in_function => Some((at(s), "'return' outside function")),
        Stmt::Break(s) if !place.in_loop => Some((at(s), "'break' outside loop")),
        Stmt::Continue(s) if !place.in_loop => Some((at(s), "'continue' not properly in loop")),
        Stmt::Nonlocal(s) if !place.in_function => {
            Some((at(s), "nonlocal declaration not allowed at module level"))
        }
        Stmt::ImportFrom(s)
            if place.in_function && s.names.iter().any(|a| a.name.as_str() == "*") =>
        {
            Some((at(s), "import * only allowed at module level"))
        }
        Stmt::Expr(s) => expr_outside(&s.value, place).map(|m| (at(s), m)),
        Stmt::Assign(s) => expr_outside(&s.value, place).map(|m| (at(s), m)),
        Stmt::FunctionDef(s) => {
            if duplicate_args(&s.args) {
                return Some((at(s), "duplicate argument in function definition"));
            }
            placement(&s.body, function_place(false))
        }
        Stmt::AsyncFunctionDef(s) => {
            if duplicate_args(&s.args) {
                return Some((at(s), "duplicate argument in function definition"));
            }
            placement(&s.body, function_place(true))
        }
        Stmt::ClassDef(s) => placement(&s.body, Place::default()),
        Stmt::For(s) => placement(&s.body, looped).or_else(|| placement(&s.orelse, place)),
        Stmt::While(s) => placement(&s.body, looped).or_else(|| placement(&s.orelse, place)),
        Stmt::AsyncFor(s) => {
            if !place.in_async {
                return Some((at(s), "'async for' outside async function"));
            }
            placement(&s.body, looped).or_else(|| placement(&s.orelse, place))
        }
        Stmt::With(s) => placement(&s.body, place),
        Stmt::AsyncWith(s) => {
            if !place.in_async {
                return Some((at(s), "'async with' outside async function"));
            }
            placement(&s.body, place)
        }
        Stmt::If(s) => placement(&s.body, place).or_else(|| placement(&s.orelse, place)),
        Stmt::Match(s) => s.cases.iter().find_map(|c| placement(&c.body, place)),
        Stmt::Try(s) => bare_except_not_last(&s.handlers)
            .map(|o| (o, "default 'except:' must be last"))
            .or_else(|| try_placement(&s.body, &s.handlers, &s.orelse, &s.finalbody, place)),
        Stmt::TryStar(s) => try_placement(&s.body, &s.handlers, &s.orelse, &s.finalbody, place),
        _ => None,
    }
}

fn try_placement(
    body: &[Stmt],
    handlers: &[ast::ExceptHandler],
    orelse: &[Stmt],
    finalbody: &[Stmt],
    place: Place,
) -> Option<(u32, &'static str)> {
    placement(body, place)
        .or_else(|| {
            handlers.iter().find_map(|h| match h {
                ast::ExceptHandler::ExceptHandler(h) => placement(&h.body, place),
            })
        })
        .or_else(|| placement(orelse, place))
        .or_else(|| placement(finalbody, place))
}
