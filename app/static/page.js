// Run by every page run (app/ui.py page_script), in the page itself; `config` is
// {lang, dir}. What Streamlit's page cannot be told from Python:
//
// 1. The page's language: Streamlit's index.html says lang="en" on the html element whatever
//    the language (WCAG 3.1.1; streamlit/streamlit#15726).
// 2. Keyboard use of Plotly's animation controls (the ring and sharding animations):
//    Plotly draws Play/Pause and the step slider in SVG that no key reaches. Each button
//    becomes a focusable role="button" that Enter and Space press; the slider a focusable
//    role="slider" that the arrow keys, Home, End, Page Up and Page Down move, one step
//    at a time, through the slider's own steps (Plotly.animate with each step's own
//    arguments, as a click on it would). Each frame shown, played or stepped to, is said
//    in a polite live region: the frame's title ("Step 2/6 · reduce-scatter"). Tab follows
//    Plotly's SVG, slider before buttons: the figures draw them in that order on screen.
// 3. Code listings and tables that scroll sideways take focus, so that a keyboard scrolls them.
//
// A MutationObserver applies 2 and 3 to whatever is drawn later; it is installed once per
// browser tab. Streamlit cleans st.html with DOMPurify, which drops a script whose text holds
// a "less than" sign followed by a letter, a slash or "!": this file must hold none.
(config) => {
  const root = document.documentElement;
  root.lang = config.lang;
  root.dir = config.dir;
  if (window.dpaPage) return;
  window.dpaPage = true;

  const frameText = (gd, name) => {
    const frame = (gd._transitionData?._frames || []).find((f) => String(f.name) === String(name));
    const title = frame?.layout?.title;
    return (typeof title === "string" ? title : title?.text) || String(name);
  };

  const stepsOf = (gd, index) => gd.layout?.sliders?.[index]?.steps || [];

  const sayFrame = (gd, name) => {
    const text = frameText(gd, name);
    const live = gd.querySelector(":scope > .dpa-live");
    if (live && live.textContent !== text) live.textContent = text;
    gd.querySelectorAll("g.slider-group[role=slider]").forEach((group) => {
      const steps = stepsOf(gd, Number(group.dataset.dpaSlider));
      const at = steps.findIndex((s) => String(s.args?.[0]?.[0]) === String(name));
      if (at >= 0) {
        group.setAttribute("aria-valuenow", String(at));
        group.setAttribute("aria-valuetext", text);
      }
    });
  };

  const button = (g) => {
    if (g.dataset.dpaKeys) return;
    g.dataset.dpaKeys = "1";
    g.setAttribute("tabindex", "0");
    g.setAttribute("role", "button");
    g.setAttribute("aria-label", g.textContent.trim());
    g.addEventListener("keydown", (event) => {
      if (event.key !== "Enter" && event.key !== " ") return;
      event.preventDefault();
      g.dispatchEvent(new MouseEvent("click", { bubbles: true }));  // Plotly's own handler
    });
  };

  const slider = (gd, group, index) => {
    if (group.dataset.dpaKeys) return;
    const opts = gd._fullLayout.sliders[index];
    const steps = stepsOf(gd, index);
    group.dataset.dpaKeys = "1";
    group.dataset.dpaSlider = String(index);
    group.setAttribute("tabindex", "0");
    group.setAttribute("role", "slider");
    group.setAttribute("aria-label", opts.name || (opts.currentvalue?.prefix || "").trim() || "Step");
    group.setAttribute("aria-valuemin", "0");
    group.setAttribute("aria-valuemax", String(steps.length - 1));
    const now = opts.active || 0;
    group.setAttribute("aria-valuenow", String(now));
    group.setAttribute("aria-valuetext", frameText(gd, steps[now]?.args?.[0]?.[0] ?? now));
    group.addEventListener("keydown", (event) => {
      const active = gd._fullLayout.sliders[index].active || 0;
      const last = steps.length - 1;
      const moves = {
        ArrowRight: active + 1, ArrowUp: active + 1, ArrowLeft: active - 1, ArrowDown: active - 1,
        PageUp: active + 1, PageDown: active - 1, Home: 0, End: last,
      };
      if (!(event.key in moves)) return;
      event.preventDefault();
      const target = Math.max(0, Math.min(last, moves[event.key]));
      const step = steps[target];
      if (target === active || !step || !window.Plotly) return;
      window.Plotly[step.method || "animate"](gd, ...(step.args || []));
    });
  };

  const enhance = (gd) => {
    const layout = gd._fullLayout;
    if (!layout || !(layout.updatemenus?.length || layout.sliders?.length)) return;
    if (!gd.querySelector(":scope > .dpa-live")) {
      const live = document.createElement("div");
      live.className = "dpa-live";
      live.setAttribute("role", "status");
      live.setAttribute("aria-live", "polite");
      gd.appendChild(live);
    }
    if (!gd.dataset.dpaFrames && typeof gd.on === "function") {
      gd.dataset.dpaFrames = "1";
      gd.on("plotly_animatingframe", (event) => sayFrame(gd, event.name));
    }
    gd.querySelectorAll("g.updatemenu-button").forEach(button);
    gd.querySelectorAll("g.slider-group").forEach((group, index) => slider(gd, group, index));
  };


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
    document.querySelectorAll(".js-plotly-plot").forEach(enhance);
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
