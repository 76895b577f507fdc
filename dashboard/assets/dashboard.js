// pulselb dashboard: keeps the server-rendered page current. The server
// sends the version of its state as a server-sent event whenever it
// changes; this script then fetches the re-rendered part of the page.
// Without JavaScript the page is the same, only not live.
(function () {
  'use strict';

  var main = document.getElementById('state');
  var live = document.getElementById('live');
  if (!main) {
    return;
  }
  if (!window.EventSource || !window.fetch) {
    if (live) {
      live.textContent = 'static page (this browser cannot follow the event stream): reload to refresh';
    }
    return;
  }
  // shown is the version on the page. Versions count per server process,
  // so the script only compares them for equality: a restarted server, or
  // another replica behind a balancer, may count lower.
  var shown = main.getAttribute('data-version') || '0';
  var pending = false;
  var fetching = false;
  // force re-renders even at the same version: the timelines move with
  // time although nothing changed.
  var force = false;

  function setLive(cls, text) {
    if (live) {
      live.className = cls;
      live.textContent = text;
    }
  }

  setLive('live-pending', 'connecting to the event stream…');

  // refresh fetches the re-rendered part of the page once for all the
  // events that came since the last fetch started.
  function refresh() {
    if (fetching || !pending) {
      return;
    }
    pending = false;
    fetching = true;
    var always = force;
    force = false;
    fetch('fragment', { cache: 'no-store', credentials: 'same-origin' })
      .then(function (r) {
        if (!r.ok) {
          throw new Error('HTTP ' + r.status);
        }
        var v = r.headers.get('X-Pulselb-Version') || '0';
        return r.text().then(function (html) { return { version: v, html: html }; });
      })
      .then(function (got) {
        if (got.version !== shown || always) {
          // The fragment is the server's own html/template output.
          main.innerHTML = got.html;
          shown = got.version;
          main.setAttribute('data-version', shown);
        }
        fetching = false;
        refresh();
      })
      .catch(function (err) {
        fetching = false;
        setLive('live-error', 'update failed (' + err.message + '); waiting for the next change');
      });
  }

  var events = new EventSource('api/v1/events');
  events.addEventListener('open', function () {
    setLive('live-on', 'live');
  });
  events.addEventListener('error', function () {
    if (events.readyState === EventSource.CLOSED) {
      setLive('live-error', 'static page: the event stream was refused; reload to refresh');
    } else {
      setLive('live-error', 'disconnected; reconnecting');
    }
  });
  events.addEventListener('state', function (e) {
    var v;
    try {
      v = String(JSON.parse(e.data).version);
    } catch (err) {
      return;
    }
    setLive('live-on', 'live');
    if (v !== shown) {
      pending = true;
      refresh();
    }
  });

  function age(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) { return s + 's'; }
    if (s < 3600) { return Math.floor(s / 60) + 'm' + (s % 60) + 's'; }
    if (s < 86400) { return Math.floor(s / 3600) + 'h' + Math.floor(s % 3600 / 60) + 'm'; }
    return Math.floor(s / 86400) + 'd' + Math.floor(s % 86400 / 3600) + 'h';
  }
  // Redraw the timelines every 30 s, so that they keep moving while
  // nothing changes.
  window.setInterval(function () {
    if (events.readyState === EventSource.OPEN) {
      force = true;
      pending = true;
      refresh();
    }
  }, 30000);

  // Keep the relative times ticking between changes.
  window.setInterval(function () {
    var now = Date.now();
    var nodes = main.querySelectorAll('.ago[data-since]');
    for (var i = 0; i < nodes.length; i++) {
      var t = Date.parse(nodes[i].getAttribute('data-since'));
      if (!isNaN(t)) {
        nodes[i].textContent = age(now - t);
      }
    }
  }, 1000);
})();
