// Run by every page run (app/ui.py page_script), in the page itself; `config` is
// {lang, dir}. What Streamlit's page cannot be told from Python:
//
// 1. The page's language: Streamlit's index.html says lang="en" on the html element whatever
//    the language (WCAG 3.1.1; streamlit/streamlit#15726).
// 2. Code listings and tables that scroll sideways take focus, so that a keyboard scrolls them.
//
// A MutationObserver applies 2 to whatever is drawn later; it is installed once per browser
// tab. Streamlit cleans st.html with DOMPurify, which drops a script whose text holds a
// "less than" sign followed by a letter, a slash or "!": this file must hold none.
(config) => {
  const root = document.documentElement;
  root.lang = config.lang;
  root.dir = config.dir;
  if (window.dpaPage) return;
  window.dpaPage = true;

  // A code listing or a table wider than the window scrolls sideways, which only a mouse or a
  // finger can do unless the keyboard can focus it (axe scrollable-region-focusable): such a
  // box, with nothing focusable inside, becomes a tab stop; the arrow keys then scroll it.
  const SCROLLERS = '[data-testid="stCode"] pre, [data-testid="stTable"] div';
  const scrollable = (box) => {
    const wide = box.scrollWidth > box.clientWidth + 1 && getComputedStyle(box).overflowX !== "visible";
    if (wide && !box.hasAttribute("tabindex") && !box.querySelector("a, button, input, [tabindex]")) {
      box.setAttribute("tabindex", "0");
      box.dataset.dpaScroll = "1";
    } else if (!wide && box.dataset.dpaScroll) {
      box.removeAttribute("tabindex");
      delete box.dataset.dpaScroll;
    }
  };

  let queued = false;
  const scan = () => {
    queued = false;
    document.querySelectorAll(SCROLLERS).forEach(scrollable);
  };
  const later = () => {
    if (!queued) {
      queued = true;
      requestAnimationFrame(scan);
    }
  };
  new MutationObserver(later).observe(document.body, { childList: true, subtree: true });
  window.addEventListener("resize", later);
  scan();
}
