const leftPad = require('left-pad/index');
console.log(leftPad('x', 3));
