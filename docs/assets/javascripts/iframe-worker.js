// Web workers for a site opened from the file system (file://), where browsers refuse `new Worker(url)`.
// The search of mkdocs-material runs its index in a worker; this runs such a worker in a hidden iframe
// instead: the worker's script is loaded there, its postMessage is routed to the page, and the page's
// messages are delivered to it as "message" events. Served over HTTP the browser's own Worker is used.
(function () {
  "use strict";
  if (window.location.protocol !== "file:") {
    return;
  }

  function FileWorker(url) {
    var listeners = [];
    var frame = document.createElement("iframe");
    var worker = this;
    var queue = [];
    var ready = false;
    frame.style.display = "none";
    frame.srcdoc = "<!doctype html><script>" +
      "window.__toPage = null;" +
      "window.postMessage = function (data) { window.__toPage(data); };" +
      "window.importScripts = function () { throw new Error('importScripts is not available offline'); };" +
      "</" + "script><script src=\"" + new URL(url, document.baseURI).href + "\"></" + "script>";

    function deliver(data) {
      var event = new MessageEvent("message", { data: data });
      if (typeof worker.onmessage === "function") {
        worker.onmessage(event);
      }
      listeners.forEach(function (listener) { listener(event); });
    }

    frame.addEventListener("load", function () {
      frame.contentWindow.__toPage = deliver;
      ready = true;
      queue.forEach(function (data) { worker.postMessage(data); });
      queue = [];
    });
    document.body.appendChild(frame);

    this.onmessage = null;
    this.onerror = null;
    this.postMessage = function (data) {
      if (!ready) {
        queue.push(data);
        return;
      }
      frame.contentWindow.dispatchEvent(new MessageEvent("message", { data: data }));
    };
    this.addEventListener = function (type, listener) {
      if (type === "message") {
        listeners.push(listener);
      }
    };
    this.removeEventListener = function (type, listener) {
      listeners = listeners.filter(function (l) { return l !== listener; });
    };
    this.terminate = function () {
      frame.remove();
    };
  }

  window.Worker = FileWorker;
})();
