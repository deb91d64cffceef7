//! CPython 3.11's nesting limits, checked on the token stream before anything is parsed.
//!
//! `compile()` refuses deep code in three places, and this pre-scan reproduces each of them over
//! `rustpython-parser`'s own lexer, keeping only a few counters per open bracket, so no syntax tree
//! is built for a file CPython would refuse and the scan's memory is bounded by the limits:
//!
//! * the tokenizer allows at most 100 levels of indentation (`MAXINDENT`,
//!   `IndentationError: too many levels of indentation`): [`Deep::Indentation`];
//! * the PEG parser's rule recursion stops at 6,000 levels (`MAXSTACK`, a `MemoryError`): each
//!   right-nested `**`, `lambda`, unary operator, `not`, `await` or conditional expression and
//!   each open bracket adds levels ([`Deep::ParserStack`]);
//! * the AST optimiser and the symbol table stop at 3,000 nodes on one path from the module (the
//!   recursion limit 1,000 times `COMPILER_STACK_FRAME_SCALE`, 3, less 3 for each Python frame
//!   of the caller: a `RecursionError`): statements and expressions on the deepest path, counted
//!   bottom-up by a shift-reduce pass over the operators ([`Deep::Depth`]).
//!
//! The limits are those of `compile()` called from a module's top level (one Python frame); a
//! caller `k` frames deeper refuses `3k` levels earlier. The cross-check against CPython runs in
//! `mcp/tests/mcp/python_parity.rs`; docs/MCP.md lists where the counts are approximate.
//!
//! The scan also counts what the parser will allocate ([`Scan::parse_bytes`]), so the work budget
//! reserves what the tree really costs.

use rustpython_parser::lexer::{LexResult, lex};
use rustpython_parser::{Mode, StringKind, Tok};

/// Deepest statement-and-expression path `compile()` accepts (called from a module's top level).
pub const MAX_PYTHON_DEPTH: u32 = 2_994;
/// Deepest parser rule recursion CPython's PEG parser accepts (`MAXSTACK`).
const MAX_PARSER_LEVEL: u32 = 6_000;
/// Most levels of indentation CPython's tokenizer accepts (`MAXINDENT` is 100, the module's own
/// level included).
pub const MAX_PYTHON_INDENT: usize = 99;
/// Deepest bracket nesting (CPython's `MAXLEVEL`); [`crate::bounded::check_python_nesting`]
/// refuses it first, the scan keeps the bound on its own frames.
const MAX_BRACKETS: usize = 200;
/// Deepest f-string nesting the scan follows (CPython 3.11 refuses more than two).
const MAX_FSTRING_NESTING: u8 = 3;

/// Parser levels of a statement at module level before its expression (`file` to `atom`).
const PARSER_BASE: u32 = 31;
/// Parser levels each enclosing block adds.
const PARSER_PER_BLOCK: u32 = 6;
/// Parser levels an open bracket adds: a group or tuple, a list, set or dict display, a call's
/// or subscript's first argument (a later argument costs [`PARSER_CALL_LATER_ARGUMENT`] more).
/// The first bracket of a statement, and a group directly inside a first group, cost less
/// (pegen reaches them through memoised lookaheads). Fitted to CPython 3.11 on 1 to 150 nested
/// brackets of each kind around a `**` chain.
const PARSER_PER_GROUP: u32 = 28;
const PARSER_PER_DISPLAY: u32 = 29;
const PARSER_PER_CALL: u32 = 24;
const PARSER_CALL_LATER_ARGUMENT: u32 = 4;
const PARSER_FIRST_BRACKET_DISCOUNT: u32 = 20;
const PARSER_GROUP_PAIR_DISCOUNT: u32 = 26;
/// Parser levels a lambda's parameters add while they are parsed.
const PARSER_LAMBDA_PARAMETERS: u32 = 8;

/// Bytes the parser allocates, measured as upper bounds (see `benches/mcp-deep-python/`): per
/// statement, per other token (an f-string's expressions are counted again: they are parsed
/// again) and per source byte.
const PARSE_BYTES_PER_STATEMENT: u64 = 320;
const PARSE_BYTES_PER_TOKEN: u64 = 104;
const PARSE_BYTES_PER_SOURCE_BYTE: u64 = 12;

/// Which of CPython's limits a source exceeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deep {
    /// More levels of indentation than the tokenizer allows.
    Indentation,
    /// Deeper rule recursion than the parser allows.
    ParserStack,
    /// A longer statement-and-expression path than the compiler allows.
    Depth,
    /// Brackets nested deeper than CPython allows.
    Brackets,
    /// f-strings nested deeper than CPython allows.
    FString,
}

impl Deep {
    /// The failure message (stable; it never quotes the source).
    pub(crate) fn message(self) -> &'static str {
        match self {
            Self::Indentation => {
                "Python source has more levels of indentation than CPython allows."
            }
            Self::ParserStack => "Python source nests deeper than CPython's parser allows.",
            Self::Depth => "Python source nests expressions deeper than CPython's compiler allows.",
            Self::Brackets => "Python source nests brackets deeper than CPython allows.",
            Self::FString => "Python source nests f-strings deeper than CPython allows.",
        }
    }
}

/// What the scan found in a source within CPython's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Upper bound of the bytes the parser allocates for the source.
    pub(crate) parse_bytes: u64,
}

/// Scans `text` for nesting past CPython's limits.
///
/// The scan stops at the first token the lexer refuses: the parser stops there too, so what it
/// builds is bounded by what was scanned.
///
/// # Errors
/// The first limit the source exceeds.
pub(crate) fn scan(text: &str) -> Result<Scan, Deep> {
    let mut counts = Counts::default();
    let mut scanner = Scanner::new(0, 0);
    scanner.run(lex(text, Mode::Module), &mut counts)?;
    let source = u64::try_from(text.len()).unwrap_or(u64::MAX);
    let parse_bytes = counts
        .statements
        .saturating_mul(PARSE_BYTES_PER_STATEMENT)
        .saturating_add(counts.tokens.saturating_mul(PARSE_BYTES_PER_TOKEN))
        .saturating_add(source.saturating_mul(PARSE_BYTES_PER_SOURCE_BYTE));
    Ok(Scan { parse_bytes })
}

#[derive(Debug, Default)]
struct Counts {
    statements: u64,
    tokens: u64,
}

/// Operators of the shift-reduce pass, by binding strength (higher binds tighter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OpKind {
    /// `yield`, `yield from`.
    Yield,
    /// `lambda …:` (its parameters' depth in `carry`).
    Lambda,
    /// `:=`.
    Walrus,
    /// `a if b` waiting for `else`.
    IfExp,
    /// `a if b else` (the test's depth in `carry`).
    Else,
    Or,
    And,
    Not,
    Compare,
    /// `*x` in a list, call or target.
    Star,
    /// `|`, `^`, `&`, shifts, `+ -`, `* / // % @`: left-associative, by precedence.
    Binary(u8),
    /// Unary `- + ~`.
    Unary,
    Power,
    Await,
}

impl OpKind {
    fn prec(self) -> u8 {
        match self {
            Self::Yield => 1,
            Self::Lambda | Self::Walrus => 2,
            Self::IfExp | Self::Else => 3,
            Self::Or => 4,
            Self::And => 5,
            Self::Not => 6,
            Self::Compare => 7,
            Self::Star => 8,
            Self::Binary(p) => p,
            Self::Unary => 15,
            Self::Power => 16,
            Self::Await => 17,
        }
    }

    fn prefix(self) -> bool {
        matches!(
            self,
            Self::Yield | Self::Lambda | Self::Not | Self::Star | Self::Unary | Self::Await
        )
    }

    fn right_assoc(self) -> bool {
        matches!(
            self,
            Self::Walrus | Self::IfExp | Self::Else | Self::Power | Self::Lambda
        )
    }

    /// Flat nodes (`a < b < c`, `a and b and c`) grow wider, not deeper.
    fn flat(self) -> bool {
        matches!(self, Self::Or | Self::And | Self::Compare)
    }

    /// Parser levels a pending operator adds (right-nested rules recurse; left-recursive chains
    /// loop).
    fn parser_levels(self) -> u32 {
        match self {
            Self::Power | Self::Lambda => 2,
            Self::Unary | Self::Not | Self::Await | Self::IfExp | Self::Else | Self::Walrus => 1,
            Self::Yield | Self::Star => 1,
            Self::Or | Self::And | Self::Compare | Self::Binary(_) => 0,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Op {
    kind: OpKind,
    carry: u32,
    /// Operands on the stack when the operator was pushed.
    base: usize,
}

/// An operand: the height of its subtree, and the flat operator that made it (if any).
#[derive(Debug, Clone, Copy)]
struct Val {
    height: u32,
    flat: Option<OpKind>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    /// The statement itself.
    Statement,
    /// `( … )` as an atom: a group, a tuple or a generator.
    Paren,
    /// `[ … ]` or `{ … }` as an atom.
    Display,
    /// `f( … )` (the callee's height in `callee`).
    Call,
    /// `a[ … ]`.
    Subscript,
    /// The parameters of `def f( … )` or the bases of `class C( … )`: no node of their own.
    Params,
    /// `lambda …:` up to its colon.
    LambdaParams,
}

#[derive(Debug)]
struct Frame {
    kind: FrameKind,
    ops: Vec<Op>,
    vals: Vec<Val>,
    expect_operand: bool,
    /// The last token was a string (implicit concatenation) or `.` (an attribute name follows).
    after_string: bool,
    after_dot: bool,
    after_is: bool,
    after_yield: bool,
    /// Highest item of the current segment, and whether it holds a comma.
    item_max: u32,
    commas: bool,
    /// Highest item over the frame (brackets).
    frame_max: u32,
    colon: bool,
    comp: bool,
    comp_target: bool,
    callee: u32,
    /// Parser levels this frame adds.
    levels: u32,
}

impl Frame {
    fn new(kind: FrameKind, callee: u32, levels: u32) -> Self {
        Self {
            kind,
            ops: Vec::new(),
            vals: Vec::new(),
            expect_operand: true,
            after_string: false,
            after_dot: false,
            after_is: false,
            after_yield: false,
            item_max: 0,
            commas: false,
            frame_max: 0,
            colon: false,
            comp: false,
            comp_target: false,
            callee,
            levels,
        }
    }

    /// Whether the frame's node is surely an ancestor of what is inside it.
    fn makes_node(&self) -> bool {
        matches!(
            self.kind,
            FrameKind::Display | FrameKind::Call | FrameKind::Subscript | FrameKind::LambdaParams
        )
    }
}

/// One indentation level: the depth of the statements in the block, and how many `elif`s the
/// current `if` statement at this level has had (each nests the next one in the last's `orelse`).
#[derive(Debug, Clone, Copy)]
struct Block {
    depth: u32,
    elifs: u32,
}

#[derive(Debug)]
struct Scanner {
    /// The statement's own frame, and the brackets (and `lambda` parameters) open in it.
    stmt: Frame,
    frames: Vec<Frame>,
    /// The module's block and each indented block.
    blocks: Vec<Block>,
    /// Depth of the current statement node (module-level statements are at 1).
    stmt_depth: u32,
    /// Depth of the block a header's colon opened (its statements: on the same line, or on the
    /// indented lines).
    pending_body: Option<u32>,
    line_depth: Option<u32>,
    at_stmt_start: bool,
    /// What the current statement is.
    header: bool,
    tuple_ok: bool,
    skip_stmt: bool,
    for_target: bool,
    def_params: bool,
    assigned: bool,
    /// Operators pending and nodes opened across all frames (a lower bound of the depth here),
    /// and the parser levels they add.
    pending: u32,
    levels: u32,
    /// Parser levels before the first frame (statement, blocks, assignment).
    base_levels: u32,
    /// Depth above the scanned source's statements (an f-string's expression sits below its
    /// statement's nodes), and how deep f-strings nest here.
    offset: u32,
    fstring_nesting: u8,
    /// Highest expression seen at statement level (what an f-string's expression adds).
    max_height: u32,
}

impl Scanner {
    fn new(offset: u32, fstring_nesting: u8) -> Self {
        Self {
            stmt: Frame::new(FrameKind::Statement, 0, 0),
            frames: Vec::new(),
            blocks: vec![Block { depth: 1, elifs: 0 }],
            stmt_depth: 1,
            pending_body: None,
            line_depth: None,
            at_stmt_start: true,
            header: false,
            tuple_ok: true,
            skip_stmt: false,
            for_target: false,
            def_params: false,
            assigned: false,
            pending: 0,
            levels: 0,
            base_levels: PARSER_BASE,
            offset,
            fstring_nesting,
            max_height: 0,
        }
    }

    fn run(
        &mut self,
        tokens: impl Iterator<Item = LexResult>,
        counts: &mut Counts,
    ) -> Result<(), Deep> {
        for token in tokens {
            // The parser stops at the first lexical error: nothing after it is ever built.
            let Ok((tok, _)) = token else {
                break;
            };
            match tok {
                Tok::Newline | Tok::Semi => counts.statements = counts.statements.saturating_add(1),
                Tok::Indent | Tok::Dedent | Tok::EndOfFile => {}
                _ => counts.tokens = counts.tokens.saturating_add(1),
            }
            self.token(tok, counts)?;
        }
        self.end_statement()
    }

    fn top(&mut self) -> &mut Frame {
        match self.frames.last_mut() {
            Some(frame) => frame,
            None => &mut self.stmt,
        }
    }

    fn check_pending(&self) -> Result<(), Deep> {
        let depth = self
            .offset
            .saturating_add(self.stmt_depth)
            .saturating_add(self.pending);
        if depth > MAX_PYTHON_DEPTH {
            return Err(Deep::Depth);
        }
        if self.base_levels.saturating_add(self.levels) > MAX_PARSER_LEVEL {
            return Err(Deep::ParserStack);
        }
        Ok(())
    }

    fn push_op(&mut self, kind: OpKind, carry: u32) -> Result<(), Deep> {
        let frame = self.top();
        let base = frame.vals.len();
        frame.ops.push(Op { kind, carry, base });
        frame.expect_operand = true;
        frame.after_string = false;
        frame.after_is = kind == OpKind::Compare && frame.after_is;
        self.pending = self.pending.saturating_add(1);
        self.levels = self.levels.saturating_add(kind.parser_levels());
        self.check_pending()
    }

    /// The operand on top has `height` levels below it and every pending operator above it: a
    /// lower bound of the depth, checked as soon as it grows (a long chain stops here, not at
    /// its end).
    fn check_height(&self, height: u32) -> Result<(), Deep> {
        let depth = self
            .offset
            .saturating_add(self.stmt_depth)
            .saturating_add(self.pending)
            .saturating_add(height);
        if depth > MAX_PYTHON_DEPTH {
            return Err(Deep::Depth);
        }
        Ok(())
    }

    /// An operand; one directly after another (a syntax error) is merged into it, so the
    /// stacks grow only with pending operators.
    fn push_val(&mut self, height: u32) -> Result<(), Deep> {
        let frame = self.top();
        let top_base = frame.ops.last().map_or(0, |op| op.base);
        let merge = !frame.expect_operand && frame.vals.len() > top_base;
        match frame.vals.last_mut() {
            Some(last) if merge => {
                last.height = last.height.max(height);
                last.flat = None;
            }
            _ => frame.vals.push(Val { height, flat: None }),
        }
        frame.expect_operand = false;
        frame.after_is = false;
        self.check_height(height)
    }

    fn binary(&mut self, kind: OpKind) -> Result<(), Deep> {
        if self.top().expect_operand {
            // A binary operator where an operand belongs (a syntax error, `/` among parameters):
            // it builds nothing.
            return Ok(());
        }
        self.reduce_while(kind.prec(), kind.right_assoc())?;
        self.push_op(kind, 0)
    }

    /// Reduces the pending operators that bind at least as tightly as an incoming one.
    fn reduce_while(&mut self, prec: u8, right_assoc: bool) -> Result<(), Deep> {
        loop {
            let Some(op) = self.top().ops.last().copied() else {
                return Ok(());
            };
            let tighter = op.kind.prec() > prec || (op.kind.prec() == prec && !right_assoc);
            if !tighter {
                return Ok(());
            }
            self.reduce_one()?;
        }
    }

    fn reduce_one(&mut self) -> Result<(), Deep> {
        let frame = self.top();
        let Some(op) = frame.ops.pop() else {
            return Ok(());
        };
        let operand = if frame.vals.len() > op.base {
            frame.vals.pop().map_or(0, |v| v.height)
        } else {
            0
        };
        let val = if op.kind.prefix() {
            Val {
                height: operand.max(op.carry).saturating_add(1),
                flat: None,
            }
        } else {
            let left = frame.vals.pop().unwrap_or(Val {
                height: 0,
                flat: None,
            });
            if op.kind.flat() && left.flat == Some(op.kind) {
                Val {
                    height: left.height.max(operand.saturating_add(1)),
                    flat: left.flat,
                }
            } else {
                Val {
                    height: left.height.max(operand).max(op.carry).saturating_add(1),
                    flat: op.kind.flat().then_some(op.kind),
                }
            }
        };
        frame.vals.push(val);
        frame.expect_operand = false;
        self.pending = self.pending.saturating_sub(1);
        self.levels = self.levels.saturating_sub(op.kind.parser_levels());
        self.check_height(val.height)
    }

    /// Ends the current item of the top frame (at a comma or a separator).
    fn end_item(&mut self) -> Result<(), Deep> {
        self.reduce_while(0, false)?;
        let frame = self.top();
        let height = frame.vals.drain(..).map(|v| v.height).max().unwrap_or(0);
        frame.item_max = frame.item_max.max(height);
        frame.expect_operand = true;
        frame.after_string = false;
        frame.after_dot = false;
        frame.after_is = false;
        Ok(())
    }

    /// Ends a segment (between separators such as `=`, `:`, `for`, `in`); at statement level
    /// its height is checked against the limit.
    fn end_segment(&mut self) -> Result<(), Deep> {
        self.end_item()?;
        let statement = self.frames.is_empty();
        let tuple_ok = self.tuple_ok;
        let frame = self.top();
        let tuple = u32::from(statement && tuple_ok && frame.commas);
        let height = frame.item_max.saturating_add(tuple);
        frame.frame_max = frame.frame_max.max(height);
        frame.item_max = 0;
        if statement {
            frame.commas = false;
            self.max_height = self.max_height.max(height);
            let depth = self
                .offset
                .saturating_add(self.stmt_depth)
                .saturating_add(height);
            if depth > MAX_PYTHON_DEPTH {
                return Err(Deep::Depth);
            }
        }
        Ok(())
    }

    fn open(&mut self, kind: FrameKind, callee: u32) -> Result<(), Deep> {
        let brackets = self
            .frames
            .iter()
            .filter(|f| f.kind != FrameKind::LambdaParams)
            .count();
        let parent = self.frames.last().map(|f| f.kind);
        let levels = if kind == FrameKind::LambdaParams {
            0
        } else if brackets >= MAX_BRACKETS {
            return Err(Deep::Brackets);
        } else {
            let cost = match kind {
                FrameKind::Display => PARSER_PER_DISPLAY,
                FrameKind::Call | FrameKind::Subscript | FrameKind::Params => PARSER_PER_CALL,
                _ => PARSER_PER_GROUP,
            };
            match (brackets, parent) {
                (0, _) => cost.saturating_sub(PARSER_FIRST_BRACKET_DISCOUNT),
                (1, Some(FrameKind::Paren)) if kind == FrameKind::Paren => {
                    cost.saturating_sub(PARSER_GROUP_PAIR_DISCOUNT)
                }
                _ => cost,
            }
        };
        let frame = Frame::new(kind, callee, levels);
        if frame.makes_node() {
            self.pending = self.pending.saturating_add(1);
        }
        self.levels = self.levels.saturating_add(levels);
        self.frames.push(frame);
        self.check_pending()
    }

    /// Closes the top frame and gives its value to the frame below.
    fn close(&mut self) -> Result<(), Deep> {
        if self.frames.is_empty() {
            return Ok(());
        }
        self.end_segment()?;
        let Some(frame) = self.frames.pop() else {
            return Ok(());
        };
        if frame.makes_node() {
            self.pending = self.pending.saturating_sub(1);
        }
        self.levels = self.levels.saturating_sub(frame.levels);
        let inner = frame.frame_max;
        let height = match frame.kind {
            FrameKind::Paren if !frame.commas && !frame.comp && inner > 0 => inner,
            FrameKind::Paren | FrameKind::Display => inner.saturating_add(1),
            FrameKind::Call => frame
                .callee
                .max(inner.saturating_add(u32::from(frame.comp)))
                .saturating_add(1),
            FrameKind::Subscript => frame
                .callee
                .max(
                    inner
                        .saturating_add(u32::from(frame.colon))
                        .saturating_add(u32::from(frame.commas)),
                )
                .saturating_add(1),
            FrameKind::Params | FrameKind::Statement | FrameKind::LambdaParams => inner,
        };
        if frame.kind == FrameKind::LambdaParams {
            return self.push_op(OpKind::Lambda, height);
        }
        self.push_val(height)
    }

    fn end_statement(&mut self) -> Result<(), Deep> {
        while !self.frames.is_empty() {
            self.close()?;
        }
        self.end_segment()?;
        self.stmt.frame_max = 0;
        self.stmt.commas = false;
        self.pending = 0;
        self.levels = 0;
        self.at_stmt_start = true;
        self.header = false;
        self.tuple_ok = true;
        self.skip_stmt = false;
        self.for_target = false;
        self.def_params = false;
        self.assigned = false;
        Ok(())
    }

    /// The first token of a statement: which statement it is, and how deep it sits.
    fn start_statement(&mut self, tok: &Tok) -> Result<(), Deep> {
        self.at_stmt_start = false;
        let blocks = u32::try_from(self.blocks.len().saturating_sub(1)).unwrap_or(u32::MAX);
        let same_line = self.line_depth.is_some();
        let block = self
            .blocks
            .last()
            .copied()
            .unwrap_or(Block { depth: 1, elifs: 0 });
        let base = self.line_depth.unwrap_or(block.depth);
        let (depth, elifs) = match tok {
            // Each `elif` is an `if` in the `orelse` of the one before it.
            Tok::Elif => {
                let elifs = block.elifs.saturating_add(1);
                (base.saturating_add(elifs), elifs)
            }
            Tok::Else | Tok::Except | Tok::Finally => {
                (base.saturating_add(block.elifs), block.elifs)
            }
            // A `case` block's statements are the `match` statement's children.
            Tok::Case => (base.saturating_sub(1).max(1), 0),
            _ => (base, 0),
        };
        if !same_line && let Some(last) = self.blocks.last_mut() {
            last.elifs = elifs;
        }
        self.pending_body = None;
        self.stmt_depth = depth;
        self.header = matches!(
            tok,
            Tok::If
                | Tok::Elif
                | Tok::Else
                | Tok::While
                | Tok::For
                | Tok::With
                | Tok::Def
                | Tok::Class
                | Tok::Try
                | Tok::Except
                | Tok::Finally
                | Tok::Match
                | Tok::Case
                | Tok::Async
        );
        self.tuple_ok = !matches!(tok, Tok::Del | Tok::Assert | Tok::With | Tok::Async);
        self.skip_stmt = matches!(tok, Tok::Import | Tok::From | Tok::Global | Tok::Nonlocal);
        self.def_params = matches!(tok, Tok::Def | Tok::Class);
        self.base_levels = PARSER_BASE.saturating_add(PARSER_PER_BLOCK.saturating_mul(blocks));
        if self.offset.saturating_add(depth) > MAX_PYTHON_DEPTH {
            return Err(Deep::Depth);
        }
        Ok(())
    }

    fn token(&mut self, tok: Tok, counts: &mut Counts) -> Result<(), Deep> {
        match tok {
            Tok::Newline => {
                let body = self.pending_body;
                self.end_statement()?;
                self.line_depth = None;
                self.pending_body = body;
                return Ok(());
            }
            Tok::Semi => return self.end_statement(),
            Tok::Indent => {
                let depth = self
                    .pending_body
                    .take()
                    .unwrap_or_else(|| self.blocks.last().map_or(1, |b| b.depth).saturating_add(1));
                self.blocks.push(Block { depth, elifs: 0 });
                if self.blocks.len() > MAX_PYTHON_INDENT.saturating_add(1) {
                    return Err(Deep::Indentation);
                }
                return Ok(());
            }
            Tok::Dedent => {
                if self.blocks.len() > 1 {
                    self.blocks.pop();
                }
                return Ok(());
            }
            Tok::EndOfFile | Tok::StartModule | Tok::StartInteractive | Tok::StartExpression => {
                return Ok(());
            }
            _ => {}
        }
        let first = self.at_stmt_start;
        if first {
            self.start_statement(&tok)?;
        }
        if self.skip_stmt {
            return Ok(());
        }
        let statement = self.frames.is_empty();
        if !matches!(tok, Tok::Colon)
            && let Some(params) = self.frames.last_mut()
            && params.kind == FrameKind::LambdaParams
            && params.levels == 0
        {
            // A lambda's parameters are parsed deeper than its body.
            params.levels = PARSER_LAMBDA_PARAMETERS;
            self.levels = self.levels.saturating_add(PARSER_LAMBDA_PARAMETERS);
            self.check_pending()?;
        }
        if self.top().after_dot {
            // The attribute's name: the `.` already counted the node.
            self.top().after_dot = false;
            if matches!(tok, Tok::Name { .. }) {
                return Ok(());
            }
        }
        match tok {
            Tok::Name { .. }
            | Tok::Int { .. }
            | Tok::Float { .. }
            | Tok::Complex { .. }
            | Tok::None
            | Tok::True
            | Tok::False
            | Tok::Ellipsis => self.push_val(1)?,
            Tok::String { value, kind, .. } => {
                let height = if matches!(kind, StringKind::FString | StringKind::RawFString) {
                    self.fstring(&value, counts)?
                } else {
                    1
                };
                if self.top().after_string {
                    if let Some(last) = self.top().vals.last_mut() {
                        last.height = last.height.max(height);
                    }
                } else {
                    self.push_val(height)?;
                }
                self.top().after_string = true;
            }
            Tok::Minus | Tok::Plus | Tok::Tilde if self.top().expect_operand => {
                self.push_op(OpKind::Unary, 0)?;
            }
            Tok::Star if self.top().expect_operand => self.push_op(OpKind::Star, 0)?,
            // `**` before an operand unpacks a mapping (a keyword or dict entry, no node).
            Tok::DoubleStar if self.top().expect_operand => {}
            Tok::Not => {
                let frame = self.top();
                // `not in` and `is not` are one comparison.
                if frame.expect_operand && !frame.after_is {
                    self.push_op(OpKind::Not, 0)?;
                }
            }
            Tok::Await => self.push_op(OpKind::Await, 0)?,
            Tok::Yield => {
                self.push_op(OpKind::Yield, 0)?;
                self.top().after_yield = true;
            }
            Tok::From if self.top().after_yield => self.top().after_yield = false,
            Tok::Lambda => self.open(FrameKind::LambdaParams, 0)?,
            Tok::Vbar => self.binary(OpKind::Binary(9))?,
            Tok::CircumFlex => self.binary(OpKind::Binary(10))?,
            Tok::Amper => self.binary(OpKind::Binary(11))?,
            Tok::LeftShift | Tok::RightShift => self.binary(OpKind::Binary(12))?,
            Tok::Plus | Tok::Minus => self.binary(OpKind::Binary(13))?,
            Tok::Star | Tok::Slash | Tok::DoubleSlash | Tok::Percent | Tok::At => {
                self.binary(OpKind::Binary(14))?;
            }
            Tok::DoubleStar => self.binary(OpKind::Power)?,
            Tok::In if statement && self.for_target => {
                self.for_target = false;
                self.end_segment()?;
            }
            Tok::In if self.top().comp_target => {
                self.top().comp_target = false;
                self.end_segment()?;
            }
            Tok::Less
            | Tok::Greater
            | Tok::EqEqual
            | Tok::NotEqual
            | Tok::LessEqual
            | Tok::GreaterEqual
            | Tok::In => self.binary(OpKind::Compare)?,
            Tok::Is => {
                self.binary(OpKind::Compare)?;
                self.top().after_is = true;
            }
            Tok::And => self.binary(OpKind::And)?,
            Tok::Or => self.binary(OpKind::Or)?,
            Tok::If if first => {}
            Tok::If if self.top().comp => self.end_segment()?,
            Tok::If => self.binary(OpKind::IfExp)?,
            Tok::Else if first => {}
            Tok::Else => self.ternary_else()?,
            Tok::ColonEqual => self.binary(OpKind::Walrus)?,
            Tok::Dot => {
                let frame = self.top();
                if !frame.expect_operand {
                    let mut height = 0;
                    if let Some(last) = frame.vals.last_mut() {
                        last.height = last.height.saturating_add(1);
                        last.flat = None;
                        height = last.height;
                    }
                    frame.after_dot = true;
                    frame.after_string = false;
                    self.check_height(height)?;
                }
            }
            Tok::Lpar => {
                if self.top().expect_operand {
                    self.open(FrameKind::Paren, 0)?;
                } else {
                    let params = statement && self.def_params;
                    self.def_params = false;
                    let callee = self.pop_operand();
                    if params {
                        self.open(FrameKind::Params, 0)?;
                    } else {
                        self.open(FrameKind::Call, callee)?;
                    }
                }
            }
            Tok::Lsqb => {
                if self.top().expect_operand {
                    self.open(FrameKind::Display, 0)?;
                } else {
                    let callee = self.pop_operand();
                    self.open(FrameKind::Subscript, callee)?;
                }
            }
            Tok::Lbrace => self.open(FrameKind::Display, 0)?,
            Tok::Rpar | Tok::Rsqb | Tok::Rbrace => {
                while self
                    .frames
                    .last()
                    .is_some_and(|f| f.kind == FrameKind::LambdaParams)
                {
                    self.close()?;
                }
                self.close()?;
            }
            Tok::Colon => {
                if self
                    .frames
                    .last()
                    .is_some_and(|f| f.kind == FrameKind::LambdaParams)
                {
                    self.close()?;
                } else if !statement {
                    self.end_segment()?;
                    self.top().colon = true;
                } else if self.header {
                    // A block opens: its statements sit one level deeper, on this line or on
                    // the indented lines after it.
                    let body = self.stmt_depth.saturating_add(1);
                    self.end_statement()?;
                    self.line_depth = Some(body);
                    self.pending_body = Some(body);
                } else {
                    self.end_segment()?;
                }
            }
            Tok::Comma => {
                self.end_item()?;
                let frame = self.top();
                let later_argument =
                    matches!(frame.kind, FrameKind::Call | FrameKind::Subscript) && !frame.commas;
                frame.commas = true;
                if later_argument {
                    frame.levels = frame.levels.saturating_add(PARSER_CALL_LATER_ARGUMENT);
                    self.levels = self.levels.saturating_add(PARSER_CALL_LATER_ARGUMENT);
                    self.check_pending()?;
                }
            }
            Tok::Equal => {
                self.end_segment()?;
                if statement && !self.assigned {
                    self.assigned = true;
                    self.base_levels = self.base_levels.saturating_add(2);
                }
            }
            Tok::For => {
                if statement {
                    self.for_target = true;
                } else {
                    self.end_segment()?;
                    let frame = self.top();
                    frame.comp = true;
                    frame.comp_target = true;
                }
            }
            // Statement keywords and anything else end an expression segment.
            _ if first => {}
            _ => self.end_segment()?,
        }
        Ok(())
    }

    fn pop_operand(&mut self) -> u32 {
        let frame = self.top();
        let top_base = frame.ops.last().map_or(0, |op| op.base);
        if frame.vals.len() > top_base {
            frame.vals.pop().map_or(0, |v| v.height)
        } else {
            0
        }
    }

    /// `else` of a conditional expression: the pending `if` takes its test's depth.
    fn ternary_else(&mut self) -> Result<(), Deep> {
        self.reduce_while(OpKind::Else.prec(), true)?;
        let frame = self.top();
        let Some(op) = frame.ops.last().copied() else {
            return Ok(());
        };
        if op.kind != OpKind::IfExp {
            return Ok(());
        }
        let test = if frame.vals.len() > op.base {
            frame.vals.pop().map_or(0, |v| v.height)
        } else {
            0
        };
        let base = frame.vals.len();
        if let Some(last) = frame.ops.last_mut() {
            *last = Op {
                kind: OpKind::Else,
                carry: test,
                base,
            };
        }
        frame.expect_operand = true;
        Ok(())
    }

    /// The height of an f-string: `JoinedStr`, `FormattedValue`, then its expressions, each
    /// scanned like a source of its own (CPython 3.11 parses them with a fresh parser).
    fn fstring(&mut self, body: &str, counts: &mut Counts) -> Result<u32, Deep> {
        if self.fstring_nesting >= MAX_FSTRING_NESTING {
            return Err(Deep::FString);
        }
        let offset = self
            .offset
            .saturating_add(self.stmt_depth)
            .saturating_add(self.pending)
            .saturating_add(1);
        let mut highest = 0;
        for (expr, extra) in fstring_expressions(body) {
            let mut inner = Scanner::new(offset.saturating_add(extra), self.fstring_nesting + 1);
            let wrapped = format!("({expr})");
            inner.run(lex(&wrapped, Mode::Module), counts)?;
            highest = highest.max(inner.max_height.saturating_add(extra));
        }
        Ok(if highest > 0 {
            highest.saturating_add(2)
        } else {
            1
        })
    }
}

/// The expressions of an f-string's replacement fields, each with the extra depth its place
/// adds (a field in a format spec sits two nodes deeper). Brackets and quotes inside a field are
/// skipped over; conversions (`!r`), `=` and format specs end it.
fn fstring_expressions(body: &str) -> Vec<(&str, u32)> {
    let mut out = Vec::new();
    collect_fields(body, 0, &mut out);
    out
}

fn collect_fields<'a>(body: &'a str, extra: u32, out: &mut Vec<(&'a str, u32)>) {
    let bytes = body.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'{' if bytes.get(i + 1) == Some(&b'{') => i += 2,
            b'{' => {
                let start = i + 1;
                let (end, spec) = field_end(bytes, start);
                if let Some(expr) = body.get(start..end) {
                    out.push((expr, extra));
                }
                if let Some((spec_start, spec_end)) = spec
                    && let Some(spec) = body.get(spec_start..spec_end)
                {
                    collect_fields(spec, extra.saturating_add(2), out);
                }
                i = spec.map_or(end, |(_, e)| e).saturating_add(1);
            }
            _ => i += 1,
        }
    }
}

/// Where a replacement field's expression ends, and its format spec (if any).
fn field_end(bytes: &[u8], start: usize) -> (usize, Option<(usize, usize)>) {
    let mut depth = 0usize;
    let mut i = start;
    let mut expr_end = None;
    let mut spec_start = None;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\'' | b'"' if spec_start.is_none() => {
                i += 1;
                while bytes.get(i).is_some_and(|&c| c != b) {
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'}' if depth > 0 => depth -= 1,
            b'}' => {
                let end = expr_end.unwrap_or(i);
                return (end, spec_start.map(|s| (s, i)));
            }
            b'!' if depth == 0 && expr_end.is_none() && bytes.get(i + 1) != Some(&b'=') => {
                expr_end = Some(i);
            }
            b'=' if depth == 0
                && expr_end.is_none()
                && bytes.get(i + 1) != Some(&b'=')
                && !matches!(
                    i.checked_sub(1).and_then(|j| bytes.get(j)),
                    Some(b'=' | b'!' | b'<' | b'>')
                ) =>
            {
                expr_end = Some(i);
            }
            b':' if depth == 0 && spec_start.is_none() => {
                if expr_end.is_none() {
                    expr_end = Some(i);
                }
                spec_start = Some(i + 1);
            }
            _ => {}
        }
        i += 1;
    }
    (expr_end.unwrap_or(bytes.len()), None)
}

#[cfg(test)]
#[path = "pydepth_tests.rs"]
mod tests;
