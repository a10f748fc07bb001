// A small Markdown renderer for model output: paragraphs, line breaks,
// headings, emphasis, strikethrough, inline code, fenced code blocks,
// ordered and unordered (nested) lists, block quotes, rules, links, tables
// (GitHub style, with column alignment) and syntax-highlighted code.
//
// Model text is untrusted. parse() turns it into a plain tree; build() turns
// the tree into DOM nodes with createElement / createTextNode only, so text
// can never become markup: "<script>" arrives on screen as the characters
// "<script>". Tags come from a fixed allowlist and the only attribute taken
// from the text is a link's href, allowed for http(s) and mailto only.
//
// The renderer is meant to be re-run on the whole text as it streams in: an
// unclosed code fence renders as a code block up to the end.

const MAX_DEPTH = 8; // nesting of quotes/lists/emphasis before text is literal

const FENCE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^( *)([-*+]|\d{1,9}[.)])(?:[ \t]+(.*))?$/;

const isBlank = (l) => /^\s*$/.test(l);
const indentOf = (l) => l.match(/^ */)[0].length;

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || QUOTE.test(line) || ITEM.test(line) || RULE.test(line);
}

// A table is a header row, a delimiter row (|---|:--:|), then body rows;
// cells are split on unescaped pipes outside code spans.
const TABLE_DELIM = /^ {0,3}\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

export function splitRow(line) {
  let s = line.trim();
  if (s.startsWith("|")) s = s.slice(1);
  if (s.endsWith("|") && !s.endsWith("\\|")) s = s.slice(0, -1);
  const cells = [];
  let cur = "";
  let code = 0;
  for (let i = 0; i < s.length; i++) {
    const ch = s[i];
    if (ch === "\\" && s[i + 1] === "|") {
      cur += "|";
      i++;
      continue;
    }
    if (ch === "`") code ^= 1;
    if (ch === "|" && !code) {
      cells.push(cur.trim());
      cur = "";
      continue;
    }
    cur += ch;
  }
  cells.push(cur.trim());
  return cells;
}

function isTableStart(lines, i) {
  return lines[i].includes("|") && i + 1 < lines.length && TABLE_DELIM.test(lines[i + 1]) && lines[i + 1].includes("-") &&
    splitRow(lines[i]).length === splitRow(lines[i + 1]).length;
}

function parseTable(lines, i, depth) {
  const head = splitRow(lines[i]);
  const align = splitRow(lines[i + 1]).map((d) => {
    const l = d.startsWith(":");
    const r = d.endsWith(":");
    return l && r ? "center" : r ? "right" : l ? "left" : "";
  });
  const cell = (tag, text, k) => {
    const n = { t: tag, c: inline(text, depth + 1) };
    if (align[k]) n.align = align[k];
    return n;
  };
  const thead = { t: "thead", c: [{ t: "tr", c: head.map((h, k) => cell("th", h, k)) }] };
  const body = [];
  i += 2;
  while (i < lines.length && !isBlank(lines[i]) && lines[i].includes("|") && !FENCE.test(lines[i])) {
    const cells = splitRow(lines[i]);
    // Rows have the header's width: extra cells go, missing ones are empty.
    body.push({ t: "tr", c: head.map((_, k) => cell("td", cells[k] ?? "", k)) });
    i++;
  }
  const table = { t: "table", c: [thead] };
  if (body.length) table.c.push({ t: "tbody", c: body });
  return [table, i];
}

// parse returns the block nodes of src. A node is a string (text) or
// {t: tag, c: children, href?, lang?, start?}.
export function parse(src, depth = 0) {
  const lines = String(src).replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) {
      i++;
      continue;
    }
    let m;
    if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length) {
        const close = lines[i].match(/^ {0,3}(`{3,}|~{3,})[ \t]*$/);
        if (close && close[1][0] === fence[0] && close[1].length >= fence.length) {
          i++;
          break;
        }
        body.push(lines[i]);
        i++;
      }
      out.push({ t: "pre", lang: m[2] || "", c: [{ t: "code", c: [body.join("\n")] }] });
      continue;
    }
    if ((m = HEADING.exec(line))) {
      out.push({ t: "h" + m[1].length, c: inline(m[2] || "", depth) });
      i++;
      continue;
    }
    if (RULE.test(line)) {
      out.push({ t: "hr", c: [] });
      i++;
      continue;
    }
    if ((m = QUOTE.exec(line))) {
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i++;
      }
      out.push(depth < MAX_DEPTH ? { t: "blockquote", c: parse(body.join("\n"), depth + 1) } : { t: "p", c: [body.join("\n")] });
      continue;
    }
    if (ITEM.test(line)) {
      i = parseList(lines, i, out, depth);
      continue;
    }
    if (depth < MAX_DEPTH && isTableStart(lines, i)) {
      const [table, next] = parseTable(lines, i, depth);
      out.push(table);
      i = next;
      continue;
    }
    const para = [line];
    i++;
    while (i < lines.length && !isBlank(lines[i]) && !startsBlock(lines[i]) && !isTableStart(lines, i)) {
      para.push(lines[i]);
      i++;
    }
    out.push({ t: "p", c: inline(para.map((l) => l.trim()).join("\n"), depth) });
  }
  return out;
}

function parseList(lines, i, out, depth) {
  const first = ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const base = first[1].length;
  const list = { t: ordered ? "ol" : "ul", c: [] };
  if (ordered) {
    const n = parseInt(first[2], 10);
    if (n !== 1) list.start = n;
  }
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (!m || m[1].length > base + 1 || /\d/.test(m[2]) !== ordered) break;
    const contentIndent = m[1].length + m[2].length + 1;
    const body = [m[3] || ""];
    let loose = false;
    i++;
    while (i < lines.length) {
      const l = lines[i];
      if (isBlank(l)) {
        // A blank line continues the item only if indented text follows.
        let j = i + 1;
        while (j < lines.length && isBlank(lines[j])) j++;
        if (j < lines.length && indentOf(lines[j]) >= contentIndent) {
          loose = true;
          for (; i < j; i++) body.push("");
          continue;
        }
        break;
      }
      const ind = indentOf(l);
      if (ind >= contentIndent || (ind > base && ITEM.test(l))) {
        body.push(l.slice(Math.min(ind, contentIndent)));
        i++;
        continue;
      }
      if (ITEM.test(l) || startsBlock(l)) break;
      body.push(l.trim()); // lazy continuation of the item's paragraph
      i++;
    }
    let children = depth < MAX_DEPTH ? parse(body.join("\n"), depth + 1) : [body.join("\n")];
    if (!loose) {
      // Tight items hold their text directly, not in paragraphs.
      children = children.flatMap((n) => (typeof n === "object" && n.t === "p" ? n.c : [n]));
    }
    list.c.push({ t: "li", c: children });
    // A blank line between items ends here; the next item continues the list.
    while (i < lines.length && isBlank(lines[i])) {
      const next = lines.slice(i).find((l) => !isBlank(l));
      const nm = next && ITEM.exec(next);
      if (!nm || nm[1].length > base + 1 || /\d/.test(nm[2]) !== ordered) return (out.push(list), i);
      i++;
    }
  }
  out.push(list);
  return i;
}

// safeHref returns url if it is an absolute http(s) or mailto URL, else "".
export function safeHref(url) {
  const u = String(url).trim();
  // Control characters and spaces can hide a scheme from naive checks.
  if (/[\u0000-\u0020\u007f]/.test(u)) return "";
  return /^(https?:\/\/|mailto:)/i.test(u) ? u : "";
}

const PUNCT = /[!-\/:-@\[-`{-~]/;

// inline parses emphasis, code spans, links and line breaks in text.
export function inline(text, depth = 0) {
  const out = [];
  let buf = "";
  const flush = () => {
    if (buf) out.push(buf);
    buf = "";
  };
  // noClose[delim] = true once a search for a closer failed: later searches
  // start further right and would fail too. Keeps pathological input
  // (thousands of "*") linear instead of quadratic.
  const noClose = Object.create(null);
  const findClose = (delim, from) => {
    if (noClose[delim]) return -1;
    let j = from;
    for (;;) {
      j = text.indexOf(delim, j);
      if (j < 0) {
        noClose[delim] = true;
        return -1;
      }
      // The closer must follow non-space text and, for "_", end a word.
      const before = text[j - 1];
      const after = text[j + delim.length];
      if (j > from && !/\s/.test(before) && !(delim[0] === "_" && after && /\w/.test(after)) && !(delim.length === 1 && text[j + 1] === delim)) {
        return j;
      }
      j += delim.length;
    }
  };
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    if (ch === "\\" && i + 1 < text.length && PUNCT.test(text[i + 1])) {
      buf += text[i + 1];
      i += 2;
      continue;
    }
    if (ch === "\n") {
      flush();
      out.push({ t: "br", c: [] });
      i++;
      continue;
    }
    if (ch === "`") {
      const run = text.slice(i).match(/^`+/)[0];
      const end = text.indexOf(run, i + run.length);
      if (end >= 0) {
        flush();
        let code = text.slice(i + run.length, end).replace(/\n/g, " ");
        if (/^ .* $/.test(code) && code.trim() !== "") code = code.slice(1, -1);
        out.push({ t: "code", c: [code] });
        i = end + run.length;
        continue;
      }
      buf += run;
      i += run.length;
      continue;
    }
    if (depth < MAX_DEPTH && (ch === "*" || ch === "_" || ch === "~")) {
      const two = text.slice(i, i + 2);
      let delim = "";
      let tag = "";
      if (two === "**" || two === "__") [delim, tag] = [two, "strong"];
      else if (two === "~~") [delim, tag] = [two, "del"];
      else if (ch !== "~") [delim, tag] = [ch, "em"];
      const prev = text[i - 1];
      const next = text[i + delim.length];
      const opens = delim && next && !/\s/.test(next) && !(ch === "_" && prev && /\w/.test(prev));
      if (opens) {
        const end = findClose(delim, i + delim.length);
        if (end > 0) {
          flush();
          out.push({ t: tag, c: inline(text.slice(i + delim.length, end), depth + 1) });
          i = end + delim.length;
          continue;
        }
      }
      buf += delim || ch;
      i += (delim || ch).length;
      continue;
    }
    if (ch === "[" && depth < MAX_DEPTH) {
      const m = /^\[([^\[\]\n]*(?:\[[^\[\]\n]*\][^\[\]\n]*)*)\]\(\s*<?([^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)>?(?:\s+"[^"\n]*")?\s*\)/.exec(text.slice(i));
      if (m) {
        const href = safeHref(m[2]);
        if (href) {
          flush();
          out.push({ t: "a", href, c: inline(m[1], MAX_DEPTH) });
          i += m[0].length;
          continue;
        }
      }
    }
    if (ch === "<") {
      const m = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i.exec(text.slice(i));
      if (m && safeHref(m[1])) {
        flush();
        out.push({ t: "a", href: m[1], c: [m[1]] });
        i += m[0].length;
        continue;
      }
    }
    if ((ch === "h" || ch === "H") && (i === 0 || !/\w/.test(text[i - 1]))) {
      const m = /^https?:\/\/[^\s<>"]+/i.exec(text.slice(i));
      if (m) {
        // Trailing punctuation belongs to the sentence, not the URL.
        let url = m[0].replace(/[.,:;!?'"]+$/, "");
        if (url.endsWith(")") && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
        flush();
        out.push({ t: "a", href: url, c: [url] });
        i += url.length;
        continue;
      }
    }
    buf += ch;
    i++;
  }
  flush();
  return out;
}

const TAGS = new Set([
  "p", "br", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre", "ul", "ol", "li", "blockquote", "hr", "a",
  "table", "thead", "tbody", "tr", "th", "td", "span",
]);
const ALIGNS = new Set(["left", "center", "right"]);

// ---- code highlighting ---------------------------------------------------
//
// A small lexer, not a parser: comments, strings, numbers, keywords and
// literals of the C family, Python, shell, Go, Rust, JavaScript and SQL,
// enough to make code readable. Tokens become spans with a class from a
// fixed set; the text stays text.

const KEYWORDS = new Set(
  ("as async await break case catch class const continue def default defer del do elif else enum except export extends " +
    "finally fn for from func go if impl import in interface is lambda let loop match mod module mut new not or and package " +
    "pass pub raise return select self static struct super switch then throw trait try type typeof use var void where while " +
    "with yield fi done esac echo local function " +
    "SELECT FROM WHERE INSERT INTO VALUES UPDATE SET DELETE CREATE TABLE JOIN ON GROUP BY ORDER LIMIT AND OR NOT NULL AS").split(" "),
);
const LITERALS = new Set("true false null nil None True False undefined this".split(" "));
const HASH_COMMENTS = new Set(["python", "py", "sh", "bash", "shell", "zsh", "ruby", "rb", "yaml", "yml", "toml", "perl", "r", "dockerfile", "makefile", "make"]);

// highlight splits code into [class, text] tokens ("" for plain text).
export function highlight(code, lang = "") {
  const hash = HASH_COMMENTS.has(lang.toLowerCase());
  const out = [];
  const push = (cls, text) => {
    if (!text) return;
    const last = out[out.length - 1];
    if (last && last[0] === cls) last[1] += text;
    else out.push([cls, text]);
  };
  let i = 0;
  const n = code.length;
  while (i < n) {
    const ch = code[i];
    const rest2 = code.slice(i, i + 2);
    let end = -1;
    let cls = "";
    const lineEnd = () => {
      const e = code.indexOf("\n", i);
      return e < 0 ? n : e;
    };
    if (rest2 === "//" && !hash) {
      end = lineEnd();
      cls = "com";
    } else if (ch === "#" && hash) {
      end = lineEnd();
      cls = "com";
    } else if (rest2 === "/*" && !hash) {
      end = code.indexOf("*/", i + 2);
      end = end < 0 ? n : end + 2;
      cls = "com";
    } else if (ch === '"' || ch === "'" || ch === "`") {
      let j = i + 1;
      while (j < n && code[j] !== ch && !(code[j] === "\n" && ch !== "`")) j += code[j] === "\\" ? 2 : 1;
      end = j < n && code[j] === ch ? j + 1 : Math.min(n, j); // unterminated: to the line's end
      cls = "str";
    } else if (/[0-9]/.test(ch) && (i === 0 || !/[\w$]/.test(code[i - 1]))) {
      const m = /^(0x[0-9a-fA-F_]+|[0-9][0-9_]*(\.[0-9_]+)?([eE][+-]?[0-9]+)?)/.exec(code.slice(i));
      end = i + m[0].length;
      cls = "num";
    } else if (/[A-Za-z_$]/.test(ch)) {
      const m = /^[A-Za-z_$][\w$]*/.exec(code.slice(i));
      const w = m[0];
      end = i + w.length;
      cls = KEYWORDS.has(w) ? "kw" : LITERALS.has(w) ? "lit" : code[end] === "(" ? "fn" : "";
    }
    if (end <= i) end = i + 1; // plain text, one character at a time
    push(cls, code.slice(i, end));
    i = end;
  }
  return out;
}

const TOKEN_CLASSES = new Set(["com", "str", "num", "kw", "lit", "fn"]);

// build turns parsed nodes into DOM nodes of doc, appended to parent.
export function build(nodes, parent, doc) {
  for (const n of nodes) {
    if (typeof n === "string") {
      parent.appendChild(doc.createTextNode(n));
      continue;
    }
    if (!TAGS.has(n.t)) continue;
    const el = doc.createElement(n.t);
    if (n.t === "a") {
      const href = safeHref(n.href);
      if (!href) {
        build(n.c, parent, doc);
        continue;
      }
      el.setAttribute("href", href);
      el.setAttribute("target", "_blank");
      el.setAttribute("rel", "noopener noreferrer nofollow");
    }
    if (n.t === "ol" && Number.isInteger(n.start)) el.setAttribute("start", String(n.start));
    if ((n.t === "th" || n.t === "td") && ALIGNS.has(n.align)) el.setAttribute("data-align", n.align);
    if (n.t === "span" && TOKEN_CLASSES.has(n.cls)) el.setAttribute("class", "tok-" + n.cls);
    if (n.t === "pre") {
      const lang = n.lang && /^[\w+#.-]{1,32}$/.test(n.lang) ? n.lang : "";
      if (lang) el.setAttribute("data-lang", lang);
      // The code's text, highlighted: spans of the fixed token classes.
      const code = doc.createElement("code");
      const text = n.c[0] && typeof n.c[0] === "object" ? n.c[0].c.join("") : "";
      for (const [cls, t] of highlight(text, lang)) {
        if (!cls) {
          code.appendChild(doc.createTextNode(t));
          continue;
        }
        const span = doc.createElement("span");
        span.setAttribute("class", "tok-" + cls);
        span.appendChild(doc.createTextNode(t));
        code.appendChild(span);
      }
      el.appendChild(code);
      parent.appendChild(el);
      continue;
    }
    build(n.c, el, doc);
    parent.appendChild(el);
  }
  return parent;
}

// render returns a DocumentFragment with src rendered as Markdown.
export function render(src, doc = globalThis.document) {
  return build(parse(src), doc.createDocumentFragment(), doc);
}
