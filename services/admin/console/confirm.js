// Actions that are not undone lightly: the button asks once more, in its own place.
import { h } from "./dom.js";

/**
 * A button labelled `label` that, when pressed, is replaced by `question`'s confirming
 * button (and one to keep things as they are); `run` is called on confirmation.
 */
export function confirmed(label, question, run, attrs = {}) {
  const holder = h("span", { class: "confirm" });
  const ask = h(
    "button",
    {
      type: "button",
      ...attrs,
      onclick: () => {
        const yes = h(
          "button",
          {
            type: "button",
            class: "danger",
            onclick: async () => {
              holder.replaceChildren(ask);
              await run();
            },
          },
          typeof question === "function" ? question() : question,
        );
        holder.replaceChildren(yes, h("button", { type: "button", onclick: () => holder.replaceChildren(ask) }, "Cancel"));
        yes.focus();
      },
    },
    label,
  );
  holder.append(ask);
  return holder;
}
