// Glue between the vendored widget manager (embed-amd.js) and the book.
(function () {
  // 1. The manager finds its icon fonts relative to the URL of its AMD modules
  //    ("@jupyter-widgets/..."), which require.js would place beside the page.
  //    Map them to this folder, where the fonts are vendored.
  var here = document.currentScript.src.replace(/[^/]*$/, "").replace(/\/$/, "");
  require.config({
    paths: { "@jupyter-widgets/html-manager/dist": here, "@jupyter-widgets": here },
  });
  // 2. The manager typesets math in widget labels with the MathJax 2 API
  //    (MathJax.Hub.Queue); the book serves MathJax 3.  Translate the call.
  document.addEventListener("DOMContentLoaded", function () {
    var mj = window.MathJax;
    if (mj && !mj.Hub) {
      mj.Hub = {
        Queue: function (job) {
          var element = Array.isArray(job) ? job[2] : undefined;
          if (window.MathJax.typesetPromise) {
            window.MathJax.typesetPromise(element ? [element] : undefined).catch(function () {});
          }
        },
      };
    }
  });
})();
