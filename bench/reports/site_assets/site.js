// The leaderboard table of a study page: a click on a header sorts by that column (again: the other way), a
// choice in a column's select keeps the rows with that value. Plain DOM, no library.
"use strict";

function cellValue(row, index) {
  return row.cells[index].dataset.v;
}

function compareValues(a, b) {
  if (a === "" || b === "") {
    return (a === "") - (b === "");  // blanks last, whichever the direction
  }
  const x = Number(a);
  const y = Number(b);
  if (!Number.isNaN(x) && !Number.isNaN(y)) {
    return x - y;
  }
  return a.localeCompare(b);
}

function sortBy(table, index) {
  const body = table.tBodies[0];
  const header = table.tHead.rows[0].cells[index];
  const ascending = header.dataset.order !== "asc";
  for (const cell of table.tHead.rows[0].cells) {
    delete cell.dataset.order;
  }
  header.dataset.order = ascending ? "asc" : "desc";
  const rows = Array.from(body.rows);
  rows.sort((r, s) => {
    const a = cellValue(r, index);
    const b = cellValue(s, index);
    if (a === "" || b === "") {
      return compareValues(a, b);
    }
    return ascending ? compareValues(a, b) : compareValues(b, a);
  });
  for (const row of rows) {
    body.appendChild(row);
  }
}

function applyFilters(table) {
  const filters = Array.from(table.querySelectorAll("select.filter")).map((select) => ({
    index: select.closest("th").cellIndex,
    value: select.value,
  }));
  let shown = 0;
  for (const row of table.tBodies[0].rows) {
    const keep = filters.every((f) => f.value === "*" || cellValue(row, f.index) === f.value);
    row.hidden = !keep;
    shown += keep ? 1 : 0;
  }
  document.getElementById("shown").textContent = String(shown);
}

function setUpBoard(table) {
  for (const cell of table.tHead.rows[0].cells) {
    cell.addEventListener("click", () => sortBy(table, cell.cellIndex));
  }
  for (const select of table.querySelectorAll("select.filter")) {
    select.addEventListener("change", () => applyFilters(table));
  }
}

document.querySelectorAll("table.board").forEach(setUpBoard);
