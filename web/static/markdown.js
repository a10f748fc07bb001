// A small Markdown renderer for model output: paragraphs, line breaks,
// headings, emphasis, strikethrough, inline code, fenced code blocks,
// ordered and unordered (nested) lists, block quotes, rules and links.
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
    const para = [line];
    i++;
    while (i < lines.length && !isBlank(lines[i]) && !startsBlock(lines[i])) {
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

const TAGS = new Set(["p", "br", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "del", "code", "pre", "ul", "ol", "li", "blockquote", "hr", "a"]);

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
    if (n.t === "pre" && n.lang && /^[\w+#.-]{1,32}$/.test(n.lang)) el.setAttribute("data-lang", n.lang);
    build(n.c, el, doc);
    parent.appendChild(el);
  }
  return parent;
}

// render returns a DocumentFragment with src rendered as Markdown.
export function render(src, doc = globalThis.document) {
  return build(parse(src), doc.createDocumentFragment(), doc);
}
