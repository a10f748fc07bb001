// Unit tests of the Markdown renderer; run with `node --test web/jstest/`.
// A fake document stands in for the DOM: it serialises what the renderer
// built, escaping text, and throws if anything tries to parse HTML.
import { test } from "node:test";
import assert from "node:assert/strict";
import { render, parse, safeHref, inline, highlight } from "../static/markdown.js";

const esc = (s) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");

class FakeText {
  constructor(data) {
    this.data = data;
  }
  get html() {
    return esc(this.data);
  }
}

class FakeElement {
  constructor(tag) {
    this.tag = tag;
    this.attrs = [];
    this.children = [];
  }
  setAttribute(k, v) {
    this.attrs.push([k, String(v)]);
  }
  appendChild(c) {
    this.children.push(c);
    return c;
  }
  set innerHTML(_) {
    throw new Error("innerHTML must not be used");
  }
  insertAdjacentHTML() {
    throw new Error("insertAdjacentHTML must not be used");
  }
  get html() {
    const inner = this.children.map((c) => c.html).join("");
    if (this.tag === "#fragment") return inner;
    const attrs = this.attrs.map(([k, v]) => ` ${k}="${esc(v)}"`).join("");
    return this.tag === "br" || this.tag === "hr" ? `<${this.tag}${attrs}>` : `<${this.tag}${attrs}>${inner}</${this.tag}>`;
  }
  *walk() {
    yield this;
    for (const c of this.children) if (c instanceof FakeElement) yield* c.walk();
  }
}

const doc = {
  createElement: (t) => new FakeElement(t),
  createTextNode: (t) => new FakeText(t),
  createDocumentFragment: () => new FakeElement("#fragment"),
};

const html = (md) => render(md, doc).html;

test("escapes HTML in model output", () => {
  const cases = [
    ["<script>alert(1)</script>", "<p>&lt;script&gt;alert(1)&lt;/script&gt;</p>"],
    ['<img src=x onerror="alert(1)">', "<p>&lt;img src=x onerror=&quot;alert(1)&quot;&gt;</p>"],
    ["**<b>bold</b>**", "<p><strong>&lt;b&gt;bold&lt;/b&gt;</strong></p>"],
    ["`<i>code</i>`", "<p><code>&lt;i&gt;code&lt;/i&gt;</code></p>"],
    ["```html\n<iframe src=x></iframe>\n```", '<pre data-lang="html"><code>&lt;iframe src=x&gt;&lt;/iframe&gt;</code></pre>'],
    ["- <svg onload=alert(1)>", "<ul><li>&lt;svg onload=alert(1)&gt;</li></ul>"],
    ["&lt; &amp; stays literal", "<p>&amp;lt; &amp;amp; stays literal</p>"],
  ];
  for (const [md, want] of cases) assert.equal(html(md), want, md);
});

test("never creates elements outside the allowlist", () => {
  const md = "<script>x</script>\n\n<style>*{}</style>\n\n[a](javascript:alert(1)) <iframe> <object>";
  const frag = render(md, doc);
  const allowed = new Set(["#fragment", "p", "br", "a", "strong", "em", "code", "pre", "ul", "ol", "li", "blockquote", "hr", "del", "h1", "h2", "h3", "h4", "h5", "h6"]);
  for (const el of frag.walk()) assert.ok(allowed.has(el.tag), el.tag);
});

test("links only with safe schemes", () => {
  const cases = [
    ["[x](https://example.com/a?b=1)", '<p><a href="https://example.com/a?b=1" target="_blank" rel="noopener noreferrer nofollow">x</a></p>'],
    ["[x](javascript:alert(1))", "<p>[x](javascript:alert(1))</p>"],
    ["[x](JaVaScRiPt:alert(1))", "<p>[x](JaVaScRiPt:alert(1))</p>"],
    ["[x](data:text/html,<script>)", "<p>[x](data:text/html,&lt;script&gt;)</p>"],
    ["see https://example.com/x.", '<p>see <a href="https://example.com/x" target="_blank" rel="noopener noreferrer nofollow">https://example.com/x</a>.</p>'],
    // A quote in the URL stays inside the href value (setAttribute), so it
    // cannot open a new attribute.
    ['[x](https://e.com/"onmouseover="alert(1))', '<p><a href="https://e.com/&quot;onmouseover=&quot;alert(1)" target="_blank" rel="noopener noreferrer nofollow">x</a></p>'],
  ];
  for (const [md, want] of cases) assert.equal(html(md), want, md);
  for (const [u, ok] of [["http://a", true], ["mailto:a@b", true], ["java\tscript:x", false], [" javascript:x", false], ["//evil.com", false], ["/rel", false], ["vbscript:x", false]]) {
    assert.equal(Boolean(safeHref(u)), ok, u);
  }
});

test("renders common Markdown", () => {
  const cases = [
    ["Hello *world* and **bold** and `code`", "<p>Hello <em>world</em> and <strong>bold</strong> and <code>code</code></p>"],
    ["line one\nline two", "<p>line one<br>line two</p>"],
    ["para one\n\npara two", "<p>para one</p><p>para two</p>"],
    ["# Title\n## Sub", "<h1>Title</h1><h2>Sub</h2>"],
    ["- a\n- b\n  - c", "<ul><li>a</li><li>b<ul><li>c</li></ul></li></ul>"],
    ["1. one\n2. two", "<ol><li>one</li><li>two</li></ol>"],
    ["3. three\n4. four", '<ol start="3"><li>three</li><li>four</li></ol>'],
    ["> quoted\n> more", "<blockquote><p>quoted<br>more</p></blockquote>"],
    ["```go\nfunc main() {}\n```\nafter", '<pre data-lang="go"><code><span class="tok-kw">func</span> <span class="tok-fn">main</span>() {}</code></pre><p>after</p>'],
    ["```\nunclosed while streaming", '<pre><code>unclosed <span class="tok-kw">while</span> streaming</code></pre>'],
    ["---", "<hr>"],
    ["~~gone~~ snake_case_name 2*3*4", "<p><del>gone</del> snake_case_name 2<em>3</em>4</p>"],
    ["\\*not em\\*", "<p>*not em*</p>"],
    ["a ** b", "<p>a ** b</p>"],
  ];
  for (const [md, want] of cases) assert.equal(html(md), want, md);
});

test("pathological input stays fast and literal", () => {
  const inputs = ["*".repeat(20000), "_a".repeat(10000), "[".repeat(5000) + "](", "`".repeat(3000), ">".repeat(200) + " deep", "- ".repeat(300) + "x"];
  for (const md of inputs) {
    const t0 = Date.now();
    render(md, doc);
    assert.ok(Date.now() - t0 < 2000, `slow on ${md.slice(0, 20)}…`);
  }
});

test("parse and inline return plain data", () => {
  assert.deepEqual(parse("hi"), [{ t: "p", c: ["hi"] }]);
  assert.deepEqual(inline("a\nb"), ["a", { t: "br", c: [] }, "b"]);
});

test("tables with alignment, escaped pipes and inline markup", () => {
  const md = "| Name | Score |  |\n|:-----|------:|:-:|\n| **a** | 1 | `x|y` |\n| b\\|c | 22 |\n\nafter";
  assert.equal(
    html(md),
    '<table><thead><tr><th data-align="left">Name</th><th data-align="right">Score</th><th data-align="center"></th></tr></thead>' +
      '<tbody><tr><td data-align="left"><strong>a</strong></td><td data-align="right">1</td><td data-align="center"><code>x|y</code></td></tr>' +
      '<tr><td data-align="left">b|c</td><td data-align="right">22</td><td data-align="center"></td></tr></tbody></table><p>after</p>',
  );
  // Not a table: no delimiter row.
  assert.equal(html("a | b\nc | d"), "<p>a | b<br>c | d</p>");
  // Markup in cells stays text.
  assert.equal(html("| <b>x</b> |\n|---|\n| <img src=x onerror=alert(1)> |"),
    "<table><thead><tr><th>&lt;b&gt;x&lt;/b&gt;</th></tr></thead><tbody><tr><td>&lt;img src=x onerror=alert(1)&gt;</td></tr></tbody></table>");
});

test("code is highlighted with fixed classes and stays text", () => {
  assert.equal(
    html("```python\n# hi\nx = \"<script>\" + 1\n```"),
    '<pre data-lang="python"><code><span class="tok-com"># hi</span>\nx = <span class="tok-str">&quot;&lt;script&gt;&quot;</span> + <span class="tok-num">1</span></code></pre>',
  );
  assert.deepEqual(highlight("if (a) /* c */ return 'x'", "js"), [
    ["kw", "if"], ["", " (a) "], ["com", "/* c */"], ["", " "], ["kw", "return"], ["", " "], ["str", "'x'"],
  ]);
  // Unterminated strings and comments end at the line / the code.
  assert.deepEqual(highlight('"abc\nx', ""), [["str", '"abc'], ["", "\nx"]]);
  assert.deepEqual(highlight("/* open", ""), [["com", "/* open"]]);
});
